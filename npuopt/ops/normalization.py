"""Normalization: x / ||x||_p over `axis` (a list), `method` L1 or L2 (any case),
`epsilon` (the tool chain's default 1e-12; 0 means float32's epsilon) the floor of
sum |x|^p before its p-th root. Float as the tool chain: float32, torch.pow.

Quantized (docs/integer-semantics.md "Normalization"), x = q + zp_in, M/s =
scale_value/shift_value ~ s_out:
* L1: S = sum |x| (int64); if s < 0: S >>= -s and s = 0; y = trunc(fl32(x * M) /
  fl32(S)) (0 where S = 0); out = R(y, 1, s).
* L2: S = sum x^2; o = the bits of S above 31, made even; r = inverse_sqrt(S >> o)
  (the isqrt table `lut`); t = max(ceil(log2 fl32(r)) - 15, 0); r = clamp(r >> t, 0,
  2^15 - 1); y = clamp32(clamp16(clamp32(x * M) >> p) * r), p =
  reciprocal_shift_value; out = R(y, 1, s + 31 - p - t + o / 2)."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, Shift
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _norm
from ._rsqrt import times_rsqrt, write_reciprocal_shift
from ._stats import shifted_bits

METHODS = {"L1": 1, "L2": 2}
DEFAULT_EPSILON = 1e-12


def order(node) -> int:
    method = str(node.get_param("method", "L2")).upper()
    if method not in METHODS:
        raise IRError(f"layer '{node.name}' (Normalization): method {method} is not one of L1, L2")
    return METHODS[method]


def epsilon(node) -> float:
    eps = node.get_param("epsilon", DEFAULT_EPSILON)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise IRError(f"layer '{node.name}' (Normalization): epsilon {eps!r} must be a number >= 0")
    return float(eps) if eps != 0 else qmath.FLOAT32_EPS


def l1_integers(node, x: torch.Tensor, axes, out_t) -> torch.Tensor:
    r = Rescale.read(node)
    m, s = r.multiplier, r.shift
    total = x.abs().sum(dim=axes, keepdim=True).expand_as(x)
    if s < 0:
        total, s = total >> -s, 0
    y = torch.trunc((x * m).to(torch.float32) / total.to(torch.float32)).to(torch.int64)
    y = torch.where(total != 0, y, torch.zeros_like(y))
    return qmath.requantize(y, 1, s, out_t.zerop, out_t.qmin, out_t.qmax)


def l2_integers(node, x: torch.Tensor, axes, out_t) -> torch.Tensor:
    r = Rescale.read(node)
    m, s = r.multiplier, r.shift
    p = Shift.read(node, "reciprocal_").value
    y, e = times_rsqrt(x, m, p, (x * x).sum(dim=axes, keepdim=True))
    shift = s + e  # per row
    return qmath.requantize(y, torch.ones_like(shift), shift, out_t.zerop, out_t.qmin, out_t.qmax)


@op_register(OpType.Normalization, "1.0")
def normalization_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    axes = _norm.check_axes(self, self.get_param("axis"), x_t.betensor.dim())
    p = order(self)
    if self.quantized:
        x = x_t.betensor.to(torch.int64) + int(x_t.zerop)
        y = l2_integers(self, x, axes, out_t) if p == 2 else l1_integers(self, x, axes, out_t)
        return QT.store_output(self, y, out_t)
    eps = epsilon(self)
    x = computing_float(x_t.betensor)
    norm = torch.sum(torch.abs(x) ** p, dim=axes, keepdim=True)
    norm = torch.where(norm < eps, torch.tensor(eps, dtype=norm.dtype), norm)
    out_t.betensor = x / torch.pow(norm, 1.0 / p)
    return out_t.betensor


@quant_register(OpType.Normalization, "1.0")
def normalization_quantize(self, *args):
    """The output signed when the input can be negative, M/s ~ s_out; L2 shifts x * M
    down to 16 bits (reciprocal_shift_value) and stores the isqrt table."""
    p = order(self)
    x_t = _norm.check_input(self)
    out_t = self.outputs[0]
    QT.quantize_activation(self, out_t, signed=x_t.qmin + int(x_t.zerop) < 0)
    rescale = Rescale.from_ratio(out_t.scale, settings_of(self).multiplier_bits)
    rescale.write(self)
    if p == 2:
        write_reciprocal_shift(self, shifted_bits(x_t), rescale.multiplier)
