"""OneHot: input 0 holds class indices; the top has a new axis `axis` (default -1, the
last; as the tool chain counts it, a negative axis other than -1 lands before the last
axis) of `depth` classes, on_value at the index's class and off_value elsewhere
(`values` = [off_value, on_value]); an index outside [0, depth) gives off_value everywhere.
float32 for float values, int32 for integer ones.

Quantized (indices: an integer input), as the tool chain: integral values give an integer
top of the bits that hold them (at least 8; scale 1, qinvariant); other values are
quantized with the activation settings over [min, max] of the two, and `values` becomes
their stored integers. The top is (y * (on - off) + off) clamped to the top's range."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import int_param


def _values(node):
    values = node.get_param("values", [0.0, 1.0])
    if not isinstance(values, list) or len(values) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise IRError(f"layer '{node.name}' (OneHot): values must be [off_value, on_value], got {values!r}")
    return values


def one_hot(node, indices: torch.Tensor) -> torch.Tensor:
    """0/1 (int64) with the classes along the new axis, as the tool chain places it."""
    depth = int_param(node, "depth", minimum=1)
    axis = int_param(node, "axis", -1)
    idx = indices.to(torch.int64)
    rank = idx.dim()
    if not -(rank + 1) <= axis <= rank:
        raise IRError(f"layer '{node.name}' (OneHot): axis {axis} is out of range for a {rank}-D input")
    moved = axis if axis >= 0 else rank
    if axis > rank - 1:
        axis = moved = -1
    rows = idx.unsqueeze(axis).transpose(axis, -1)
    invalid = (rows < 0) | (rows >= depth)
    y = torch.nn.functional.one_hot(torch.where(invalid, torch.zeros_like(rows), rows), depth)
    y = y * (~invalid).unsqueeze(-1)
    return y.squeeze(-2).transpose(moved, -1)


@op_register(OpType.OneHot, "1.0")
def onehot_forward(self, *args):
    check_inputs(self, (1,))
    off, on = _values(self)
    y = one_hot(self, self.inputs[0].betensor)
    out = self.outputs[0]
    if self.quantized:
        y = (y * (on - off) + off).clamp(out.qmin, out.qmax)
        return QT.store_output(self, y.trunc(), out)
    dtype = torch.float32 if any(isinstance(v, float) for v in (off, on)) else torch.int32
    out.betensor = (y.to(torch.float64) * (on - off) + off).to(dtype)
    return out.betensor


def _fitting_bits(lo: float, hi: float):
    """(bits, signed) of the narrowest integer of at least 8 bits holding [lo, hi]."""
    signed = lo < 0
    bits = 8
    while not (qmath.integer_range(bits, signed)[0] <= lo and hi <= qmath.integer_range(bits, signed)[1]):
        bits += 1
    return bits, signed


@quant_register(OpType.OneHot, "1.0")
def onehot_quantize(self, *args):
    index, out = self.inputs[0], self.outputs[0]
    if not index.qinvariant:
        raise QT.Unsupported(f"layer '{self.name}' (OneHot): its indices (input 0) are not integers")
    off, on = _values(self)
    lo, hi = min(off, on), max(off, on)
    if float(off).is_integer() and float(on).is_integer():
        bits, signed = _fitting_bits(lo, hi)
        dtype = Dtype.integer(bits, signed)
        QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, bits, signed)
        out.qinvariant = True
        return
    QT.quantize_activation(self, out, lo, hi, signed=lo < 0)
    q = qmath.quantize(torch.tensor([off, on], dtype=torch.float64), out.scale, out.zerop, out.qmin, out.qmax)
    self.params["values"] = [int(v) for v in q]
