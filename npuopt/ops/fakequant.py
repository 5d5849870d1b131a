"""FakeQuantWithMinMaxVars: TensorFlow's fake quantization as the parser writes it
(params `min`, `max`, `num_bits`, `narrow_range`): the input rounded onto a grid of
num_bits unsigned steps over [min, max] and back to float.

Float, as the tool chain computes it (its own nudging, not TensorFlow's), in float32:
the range is moved to hold 0: [0, max - min] when min > 0, [min - max, 0] when max < 0,
else min' = s * round(min / s) with s = (max - min) / (2^num_bits - 1) and max' = max +
min' - min; on it the asymmetric unsigned grid of the tool chain's quantizer (scale =
(2^num_bits - 1) / (max' - min'), zero point round(scale * min') kept within +-(2^(num_bits
- 1) - 1)), integers from 1 (narrow_range) or 0 to 2^num_bits - 1, then the dequantized
value clamped to [min', max'].

Quantized: the tool chain takes no grid from min/max; the top takes its input's
quantization and the integers pass unchanged."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import bool_param, int_param
from ._unary import operands


def _params(node):
    """(min, max, num_bits, narrow_range), checked: numbers with min <= max, 2 to 16 bits."""
    bounds = []
    for key in ("min", "max"):
        value = node.get_param(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise IRError(f"layer '{node.name}' ({node.type}): {key} must be a number, got {value!r}")
        bounds.append(float(value))
    if bounds[0] > bounds[1]:
        raise IRError(f"layer '{node.name}' ({node.type}): min {bounds[0]} exceeds max {bounds[1]}")
    bits = int_param(node, "num_bits", 8)
    if not 2 <= bits <= 16:
        raise IRError(f"layer '{node.name}' ({node.type}): num_bits must lie in [2, 16], got {bits}")
    return (*bounds, bits, bool_param(node, "narrow_range", False))


def nudged_range(lo: float, hi: float, bits: int):
    """[min', max'] as float32 tensors, as the tool chain moves [min, max] to hold 0."""
    lo_t, hi_t = torch.tensor(lo, dtype=torch.float32), torch.tensor(hi, dtype=torch.float32)
    zero = torch.tensor(0.0, dtype=torch.float32)
    if lo_t > 0:
        return zero, hi_t - lo_t
    if hi_t < 0:
        return lo_t - hi_t, zero
    step = (hi_t - lo_t) / ((1 << bits) - 1)
    lo_adj = step * torch.round(lo_t / step)
    return lo_adj, hi_t + lo_adj - lo_t


def fake_quantize(x: torch.Tensor, lo: float, hi: float, bits: int, narrow: bool) -> torch.Tensor:
    lo_adj, hi_adj = nudged_range(lo, hi, bits)
    levels = float((1 << bits) - 1)
    span = hi_adj - lo_adj
    span = torch.where((span < qmath.FLOAT32_EPS) | torch.isnan(span), torch.tensor(levels), span)
    scale = torch.tensor(levels, dtype=torch.float32) / span
    limit = (1 << (bits - 1)) - 1
    zp = torch.clamp(torch.round(scale * lo_adj), -limit, limit)
    q = torch.clamp(torch.round(scale * x.to(torch.float32) - zp), 1.0 if narrow else 0.0, levels)
    q = torch.where(torch.isnan(q), torch.zeros_like(q), q)
    return torch.clamp((q + zp) * (1.0 / scale), lo_adj, hi_adj)


@op_register(OpType.FakeQuantWithMinMaxVars, "1.0")
def fakequant_forward(self, *args):
    inp, out = operands(self)
    if self.quantized:
        out.betensor = inp.betensor
        return out.betensor
    out.betensor = fake_quantize(inp.betensor, *_params(self))
    return out.betensor


@quant_register(OpType.FakeQuantWithMinMaxVars, "1.0")
def fakequant_quantize(self, *args):
    _params(self)
    QT.pass_through(self)
