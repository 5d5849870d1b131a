"""What the YOLO and R-CNN post-processing layers (Region, RegionFuse, Proposal,
GenerateProposals, MaxRoiPool, RefineDetDetection) add to the detection helpers of
_boxes.py: counts and sizes checked against the tops' IR shapes (a layer being built has
none yet), greedy NMS over boxes in a given order, their tops' types, and the tool chain's
float32 logarithm of its power-of-two grids."""
import torch

from ..quant import tensors as QT
from ._boxes import fail


def count_param(node, key: str, default=None, minimum: int = 1) -> int:
    """An integer param of at least `minimum` (a count, a size)."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(node, f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def room(node, index: int, axis: int, default: int) -> int:
    """Axis `axis` of top `index` as the IR states it; `default` where it states none (a
    layer being built computes its tops' shapes)."""
    shape = node.outputs[index].ir_shape
    return int(shape[axis]) if shape is not None and len(shape) > axis else default


def check_room(node, index: int, axis: int, want: int, what: str) -> None:
    """The IR's size of top `index` along `axis` must be `want` (what a param says)."""
    got = room(node, index, axis, want)
    if got != want:
        raise fail(node, f"{what} is {want}, but top {index} ('{node.outputs[index].name}') holds {got}")


def greedy_keep(count: int, limit: int, survivors) -> torch.Tensor:
    """Greedy NMS over `count` boxes in their order: box i, when still alive, is kept and
    `survivors(i)` (booleans for the boxes after it) removes those it suppresses; the
    positions of the first `limit` kept."""
    alive = torch.ones(count, dtype=torch.bool)
    keep = []
    for i in range(count):
        if not alive[i]:
            continue
        keep.append(i)
        if len(keep) == limit:
            break
        alive[i + 1:] &= survivors(i)
    return torch.tensor(keep, dtype=torch.int64)


def set_tops(node, values, first_count: int) -> list:
    """`values` as the layer's tops: integers in the tops' types when quantized; in float, the
    tops from `first_count` on (counts, labels) int32 as the parser types them."""
    for i, (t, v) in enumerate(zip(node.outputs, values)):
        if node.quantized:
            QT.store_output(node, v, t)
        else:
            t.betensor = v if i < first_count else v.to(torch.int32)
    return [t.betensor for t in node.outputs]


def floor_log2(v) -> int:
    """floor(log2 v) with the logarithm of float32 v taken in float32, as the tool chain does."""
    return int(torch.floor(torch.log2(torch.as_tensor(v, dtype=torch.float32))))
