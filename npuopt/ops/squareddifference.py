"""SquaredDifference: (a - b)^2 with NumPy broadcasting (float32).

Quantized, the tool chain's form, with `scale_value=[M_out, M_a, M_b]` and
`shift_value=[s_out, s_a, s_b]` (one multiplier/shift per branch):
A' = requantize(q_a + zp_a, M_a, s_a), B' = requantize(q_b + zp_b, M_b, s_b) (both
into [-2^31, 2^31 - 1], zero point 0), D = min((A' - B')^2, 2^31 - 1),
out = requantize(D, M_out, s_out) into the (unsigned) output.

npuopt chooses, as the tool chain does: with n_i the signed bits of q_i + zp_i, both
inputs go to the common scale s = min(s_a, s_b) / r * 2^l, r = max(2 * (max n_i - 15), 1),
l = min(15 - n_i) >= 0 (A' and B' within 15 bits, D within 31), and
M_out * 2^-s_out ~ s_out_scale / s^2; each multiplier of at most 15 bits."""
import torch

from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, shift_dtype
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs, check_quantized_operands, float_operands
from .eltwise import reject_all_invariant

ALIGNED_BITS = 15       # each aligned input's magnitude
MULTIPLIER_BITS = 16    # asked of scale_approximation (which caps it at 15)


def signed_bits(lo: int, hi: int) -> int:
    """The fewest bits of a signed integer holding [lo, hi]."""
    bits = 1
    while lo < -(1 << (bits - 1)) or hi > (1 << (bits - 1)) - 1:
        bits += 1
    return bits


def squared_difference_quantized(node):
    a_t, b_t = node.inputs
    out = node.outputs[0]
    check_quantized_operands(node)
    br = BranchRescales.read(node, 3)
    shifts = br.shifts if isinstance(br.shifts, list) else [br.shifts] * 3
    lo, hi = QT.INT32_MIN, QT.INT32_MAX
    a = qmath.requantize(QT.shifted(a_t), br.multipliers[1], shifts[1], 0, lo, hi)
    b = qmath.requantize(QT.shifted(b_t), br.multipliers[2], shifts[2], 0, lo, hi)
    d = torch.clamp((a - b) ** 2, lo, hi)
    y = qmath.requantize(d, br.multipliers[0], shifts[0], out.zerop, out.qmin, out.qmax)
    return QT.store_output(node, y, out)


@op_register(OpType.SquaredDifference, "1.0")
def squared_difference_forward(self, *args):
    check_inputs(self, (2,))
    if self.quantized:
        return squared_difference_quantized(self)
    a, b = float_operands(self)
    self.outputs[0].betensor = (a - b) * (a - b)
    return self.outputs[0].betensor


@quant_register(OpType.SquaredDifference, "1.0")
def squared_difference_quantize(self, *args):
    check_inputs(self, (2,))
    QT.check_quantized_inputs(self)
    reject_all_invariant(self, self.inputs)
    a_t, b_t = self.inputs
    out = self.outputs[0]
    QT.quantize_activation(self, out, signed=False)
    bits = [signed_bits(t.qmin + int(t.zerop), t.qmax + int(t.zerop)) for t in (a_t, b_t)]
    reduce = max(2 * (max(bits) - ALIGNED_BITS), 1)
    left = min(max(0, ALIGNED_BITS - n) for n in bits)
    common = min(a_t.scale, b_t.scale) / reduce
    ratios = [out.scale / (common * common) / 2.0 ** (2 * left),
              common / a_t.scale * 2.0 ** left, common / b_t.scale * 2.0 ** left]
    pairs = [qmath.scale_approximation(r, MULTIPLIER_BITS) for r in ratios]
    shifts = [s for _, s in pairs]
    BranchRescales([m for m, _ in pairs], shifts, shift_types=[shift_dtype(s) for s in shifts]).write(self)
