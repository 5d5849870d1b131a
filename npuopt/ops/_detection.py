"""What the detection post-processing layers share (Region, RegionFuse, Proposal,
GenerateProposals, MaxRoiPool, RefineDetDetection): params checked as one-line
IRErrors, the box counts their tops hold, the tool chain's int32 wrap-around, and
the orders they list boxes in."""
import torch

from ..errors import IRError

INT32_WRAP = 1 << 32
INT32_HALF = 1 << 31


def layer_error(node, message: str) -> IRError:
    return IRError(f"layer '{node.name}' ({node.type}): {message}")


def number_param(node, key: str, default=None) -> float:
    """A numeric param (not a bool); missing: `default`, or an IRError when it is None."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise layer_error(node, f"{key} must be a number, got {value!r}")
    return float(value)


def count_param(node, key: str, default=None, minimum: int = 1) -> int:
    """An integer param of at least `minimum` (a count, a size)."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise layer_error(node, f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def numbers_param(node, key: str, length: int = None) -> list:
    """A list of numbers (of `length` entries when given)."""
    value = node.get_param(key)
    value = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value) or \
            (length is not None and len(value) != length):
        want = f"{length} numbers" if length is not None else "a list of numbers"
        raise layer_error(node, f"{key} must be {want}, got {node.get_param(key)!r}")
    return [float(v) for v in value]


def check_counts(node, n_inputs: int, n_outputs: int) -> None:
    if len(node.inputs) != n_inputs or len(node.outputs) != n_outputs:
        raise layer_error(node, f"takes {n_inputs} inputs and {n_outputs} tops, the IR gives "
                                f"{len(node.inputs)} and {len(node.outputs)}")


def top_size(node, index: int, axis: int, default: int) -> int:
    """Axis `axis` of top `index` as the IR states it (`default` where the IR states none:
    a layer being built)."""
    shape = node.outputs[index].ir_shape
    return int(shape[axis]) if shape is not None and len(shape) > axis else default


def check_top_size(node, index: int, axis: int, want: int, what: str) -> None:
    """The IR's size of top `index` along `axis` must be `want` (what a param says)."""
    got = top_size(node, index, axis, want)
    if got != want:
        raise layer_error(node, f"{what} is {want}, but top {index} ('{node.outputs[index].name}') holds {got}")


def floor_log2(v) -> int:
    """floor(log2 v) with the logarithm of float32 v taken in float32, as the tool chain does."""
    return int(torch.floor(torch.log2(torch.as_tensor(v, dtype=torch.float32))))


def wrap_int32(v: torch.Tensor) -> torch.Tensor:
    """int64 values as the tool chain's int32 tensors hold them (two's complement)."""
    return torch.remainder(v + INT32_HALF, INT32_WRAP) - INT32_HALF


def descending(scores: torch.Tensor) -> torch.Tensor:
    """The order of `scores` from the largest down, ties by position (a stable sort)."""
    return torch.sort(scores, descending=True, stable=True).indices


def class_runs(classes: torch.Tensor):
    """(order, labels, counts): the positions of `classes` grouped by class, classes
    ascending, each class's positions in their order; the classes present and how many."""
    order = torch.sort(classes, stable=True).indices
    labels, counts = torch.unique_consecutive(classes[order], return_counts=True)
    return order, labels, counts
