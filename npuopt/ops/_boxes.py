"""What the detection post-processing layers share (DecodeBox, DetectionOutput, NMS,
FilterBoxes, PostNMS1, BoundingBox): their one-line param checks, the tool chain's
orderings (torch's CPU sort, which is not stable: ties fall as it leaves them, and the
tool chain's integers depend on that), the selection of (box, class) pairs above a
score threshold grouped by class, the box lookup tables and their int32 arithmetic."""
import math

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of

INT16_MAX = 32767


def fail(node, message: str) -> IRError:
    return IRError(f"layer '{node.name}' ({node.type}): {message}")


def count_io(node, inputs: int, outputs: int) -> None:
    if len(node.inputs) != inputs or len(node.outputs) != outputs:
        raise fail(node, f"takes {inputs} inputs and gives {outputs} tops, the IR has {len(node.inputs)} and "
                         f"{len(node.outputs)}")


def number(node, key: str, default=None) -> float:
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise fail(node, f"{key} must be a number, got {value!r}")
    return float(value)


def numbers(node, key: str, count: int, default=None, positive: bool = False) -> list:
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if not isinstance(value, (list, tuple)) or len(value) != count or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) or (positive and not v > 0) for v in value):
        kind = "positive numbers" if positive else "numbers"
        raise fail(node, f"{key} must be a list of {count} {kind}, got {value!r}")
    return [float(v) for v in value]


def flag(node, key: str, default: bool) -> bool:
    value = node.get_param(key, default)
    if value in (0, 1):  # True/False included
        return bool(value)
    raise fail(node, f"{key} must be true or false, got {value!r}")


def top_size(node, top: int, axis: int) -> int:
    """Axis `axis` of top `top`'s IR shape: the room the layer fills (max boxes, classes)."""
    shape = node.outputs[top].ir_shape
    if shape is None or len(shape) <= axis:
        raise fail(node, f"top {top} needs an IR shape of at least {axis + 1} axes, has {shape}")
    return int(shape[axis])


def shape_is(node, x: torch.Tensor, what: str, rank: int, last: int = None) -> None:
    if x.dim() != rank or (last is not None and x.shape[-1] != last):
        want = f"[..., {last}]" if last is not None else f"{rank}-D"
        raise fail(node, f"{what} must be {rank}-D {want if last is not None else ''}".rstrip()
                   + f", got {list(x.shape)}")


# ---- orderings ------------------------------------------------------------------------
def tool_chain_argsort(values: torch.Tensor, descending: bool) -> torch.Tensor:
    """torch's argsort on the CPU, not stable, as the tool chain calls it: equal values come
    out in the order its introsort leaves them (for integers sorted ascending, from 2^15
    values on, its stable radix sort). `values` must have the dtype the tool chain sorts
    (float for float layers, int64 for integer ones)."""
    return values.cpu().argsort(descending=descending).to(values.device)


def group_by_class(box_ids: torch.Tensor, class_ids: torch.Tensor):
    """(box ids, class ids) reordered class by class (ascending class, each class's pairs in
    the order given), and the classes present with their counts."""
    order = torch.sort(class_ids, stable=True).indices
    box_ids, class_ids = box_ids[order], class_ids[order]
    labels, counts = torch.unique_consecutive(class_ids, return_counts=True)
    return box_ids, class_ids, labels, counts


def fill(room: int, values: torch.Tensor, like: torch.Tensor, what: str, node) -> torch.Tensor:
    """`values` in the first entries of a zero vector of `room` entries."""
    if values.numel() > room:
        raise fail(node, f"{values.numel()} {what} do not fit the top's {room} entries")
    out = torch.zeros(room, dtype=like.dtype, device=like.device)
    out[:values.numel()] = values.to(like.dtype)
    return out


# ---- integer arithmetic of the tool chain ----------------------------------------------------
def wrap_int32(x: torch.Tensor) -> torch.Tensor:
    """int64 integers brought into int32 as its two's complement does (what the tool chain's
    int32 tensors hold after a product that passes 2^31)."""
    return x.to(torch.int64).to(torch.int32).to(torch.int64)


def lookup(q: torch.Tensor, lut: torch.Tensor, in_bits: int, in_signed: bool, out_bits: int,
           out_signed: bool) -> torch.Tensor:
    """The tool chain's lookup of integer codes q (in_bits wide) in a table of 2^k entries:
    index q - qmin, the low in_bits - k bits interpolated, clamped to the out range."""
    qmin = qmath.integer_range(in_bits, in_signed)[0]
    return qmath.lut_lookup(q.to(torch.int64) - qmin, lut, in_bits, out_bits, out_signed)


def lut_codes(bits: int, signed: bool, items_bits: int) -> torch.Tensor:
    """The input codes the entries of a table of 2^min(bits, items_bits) entries stand for
    (entry i: code qmin + i * 2^(bits - k), the point lookup() reads it at)."""
    k = min(bits, items_bits)
    qmin = qmath.integer_range(bits, signed)[0]
    return qmin + torch.arange(1 << k, dtype=torch.float64) * float(1 << (bits - k))


def code_values(t, codes: torch.Tensor) -> torch.Tensor:
    """Real values (float64) of integer codes of quantized tensor t."""
    return (codes + float(t.zerop)) / float(t.scale)


def power_of_two_scale(absmax: float, top: int = INT16_MAX) -> int:
    """The largest 2^n (n >= 0) with absmax * 2^n <= top."""
    if absmax <= 0:
        return 1 << 14
    return 1 << max(0, math.floor(math.log2(top / absmax)))


def quantize_number(value: float, t) -> int:
    """clamp(round(value * scale - zp), qmin, qmax) on quantized tensor t's grid."""
    return int(qmath.quantize(torch.tensor([value]), t.scale, t.zerop, t.qmin, t.qmax).item())


def store_ints(y: torch.Tensor, out) -> torch.Tensor:
    """Integers y as top `out` holds them: clamped to its dtype's range (as the tool chain
    fits a top to its dtype), in its backend type."""
    out.betensor = y.to(torch.int64).clamp(out.dtype.qmin, out.dtype.qmax).to(out.dtype.torch_dtype)
    return out.betensor



def set_tops(node, per_sample, integer_tops) -> list:
    """Each top from the samples' parts stacked: in a quantized layer integers on their
    grids; in a float one int32 for the tops in `integer_tops` (counts, classes, indices)."""
    for i, (out, parts) in enumerate(zip(node.outputs, zip(*per_sample))):
        y = torch.stack(parts)
        if node.quantized:
            store_ints(y, out)
        else:
            out.betensor = y.to(torch.int32) if i in integer_tops else y
    return [t.betensor for t in node.outputs]


def per_tensor_activations(node) -> None:
    """The tool chain quantizes these layers with per-tensor activations only."""
    QT.check_quantized_inputs(node)
    if settings_of(node).quantize_method_for_activation.per_channel:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): per-channel activations are not supported")
