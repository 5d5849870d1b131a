"""SufficientStatistics (TensorFlow's sufficient_statistics): input 0 x, input 1 the shift
(broadcast against x); `axis` (a list). Two tops, the sums over `axis` (kept, size 1) of
x - shift and of (x - shift)^2, float32 as the tool chain computes them.

Quantized, the tool chain's form: b_i the bits of the signed range holding input i's
q + zp, L = min(max(0, 15 - b_0), max(0, 15 - b_1)), m = min(s_0, s_1) / max(2 (max(b_0,
b_1) - 15), 1); `scale_value`/`shift_value` = [out0, out1, in0, in1] (15-bit multipliers)
for s_sum / m / 2^L, s_squares / m^2 / 2^2L, m / s_0 * 2^L, m / s_1 * 2^L. With X_i =
R(q_i + zp_i, M_in_i, s_in_i) into 32 bits and D = X_0 - X_1:
* top 0: S = clamp32(sum D), out = clamp(trunc32(S * M_0 / 2^s_0) - zp, qmin, qmax)
  (a negative s_0 multiplies in float32, as the tool chain);
* top 1: V = clamp(D^2, 0, 2^32 - 1) split as H = V >> 16 and L = V - (H << 16), their
  sums clamped into [0, 2^32 - 1], out = clamp(((H_sum * M_1 << 16) + L_sum * M_1) >> s_1 -
  zp, qmin, qmax).
The top of the sums is signed, that of the squares unsigned (signed with
force_dtype_int), from their calibrated ranges; integer (qinvariant) inputs give 32-bit
unscaled tops."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs
from ._movement import int_list
from ._norm import check_axes
from ._stats import shifted_bits, stored_rescales

MULTIPLIER_BITS = 16
HEADROOM_BITS = 15
HALF_BITS = 16
UINT32_MAX = (1 << 32) - 1


def _axes(node, ndim: int):
    check_inputs(node, (2,))
    if len(node.outputs) != 2:
        raise IRError(f"layer '{node.name}' (SufficientStatistics): needs two tops (sums, sums of squares), has "
                      f"{len(node.outputs)}")
    broadcast_shape(node, *(t.betensor for t in node.inputs))
    return check_axes(node, int_list(node, "axis"), ndim)


def _wrap32(v: torch.Tensor) -> torch.Tensor:
    """v as torch's int32 cast holds it (two's complement wrap)."""
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _rshift(v: torch.Tensor, s: int) -> torch.Tensor:
    """v >> s as torch's int64 shift computes it (a negative s shifts by 63)."""
    return v >> (s if 0 <= s < 64 else 63)


def _sums(d: torch.Tensor, axes, r):
    m0, m1 = r.multipliers[:2]
    s0, s1 = r.shifts[:2]
    lo32, hi32 = qmath.integer_range(32, True)
    total = d.sum(dim=axes, keepdim=True).clamp(lo32, hi32) * m0
    if s0 >= 0:
        first = torch.div(total, 1 << s0, rounding_mode="trunc")
    else:  # the tool chain divides by a float 2^s0: float32
        first = torch.trunc(total.to(torch.float32) * float(2 ** -s0)).to(torch.int64)
    v = (d * d).clamp(0, UINT32_MAX)
    high = v >> HALF_BITS
    low = v - (high << HALF_BITS)
    high, low = (h.sum(dim=axes, keepdim=True).clamp(0, UINT32_MAX) for h in (high, low))
    return _wrap32(first), _rshift((high * m1 << HALF_BITS) + low * m1, s1)


@op_register(OpType.SufficientStatistics, "1.0")
def sufficientstatistics_forward(self, *args):
    x_t, shift_t = self.inputs
    axes = _axes(self, x_t.betensor.dim())
    out0, out1 = self.outputs
    if not self.quantized:
        d = computing_float(x_t.betensor) - computing_float(shift_t.betensor)
        out0.betensor, out1.betensor = d.sum(dim=axes, keepdim=True), (d * d).sum(dim=axes, keepdim=True)
        return out0.betensor, out1.betensor
    r = stored_rescales(self, 4)
    lo32, hi32 = qmath.integer_range(32, True)
    x, shift = (qmath.requantize(t.betensor.to(torch.int64) + int(t.zerop), m, s, 0, lo32, hi32).to(torch.int64)
                for t, m, s in zip(self.inputs, r.multipliers[2:], r.shifts[2:]))
    first, second = _sums(x - shift, axes, r)
    QT.store_output(self, (first - int(out0.zerop)).clamp(out0.qmin, out0.qmax), out0)
    QT.store_output(self, (second - int(out1.zerop)).clamp(out1.qmin, out1.qmax), out1)
    return out0.betensor, out1.betensor


@quant_register(OpType.SufficientStatistics, "1.0")
def sufficientstatistics_quantize(self, *args):
    QT.check_quantized_inputs(self)
    x_t, shift_t = self.inputs
    out0, out1 = self.outputs
    signs = (True, bool(self.force_dtype_int))
    if x_t.qinvariant and shift_t.qinvariant:
        for out, signed in zip(self.outputs, signs):
            dtype = Dtype.integer(32, signed)
            QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, 32, signed)
            out.qinvariant = True
    else:
        for out, signed in zip(self.outputs, signs):
            QT.quantize_activation(self, out, signed=signed)
    b0, b1 = shifted_bits(x_t), shifted_bits(shift_t)
    left = min(max(0, HEADROOM_BITS - b0), max(0, HEADROOM_BITS - b1))
    m = min(x_t.scale, shift_t.scale) / max(2 * (max(b0, b1) - HEADROOM_BITS), 1)
    ratios = [out0.scale / m / 2 ** left, out1.scale / (m * m) / 2 ** (2 * left),
              m / x_t.scale * 2 ** left, m / shift_t.scale * 2 ** left]
    rescales = [Rescale.from_ratio(v, MULTIPLIER_BITS) for v in ratios]
    BranchRescales([r.multiplier for r in rescales], [r.shift for r in rescales],
                   [r.multiplier_type for r in rescales], [r.shift_type for r in rescales]).write(self)
