"""Eltwise: elementwise ADD/SUB/MUL/MAX/MIN of two inputs, with broadcasting and a
fused activation.

Quantized, with A = q_a + zp_a, B = q_b + zp_b (the tool chain's form):
  ADD/SUB/MAX/MIN: X = op(A * M_a, B * M_b) with `scale_value=[M_out, M_a, M_b]`
                   (each product saturated to [-2^31, 2^31]);
  MUL:             X = A * B, `scale_value=M_out`;
then the fused activation and the rescale M_out * 2^-shift_value."""
import math

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from .activation import apply_fused_activation, fused_forward, quantize_fused

FLOAT_ELTWISE = {
    "ADD": torch.add,
    "SUB": torch.sub,
    "MUL": torch.mul,
    "MAX": torch.maximum,
    "MIN": torch.minimum,
}
BRANCH_MULTIPLIER_MAX = 32767   # the tool chain's int16-sized branch multipliers
BRANCH_PRODUCT_MAX = 1 << 31     # A * M_a is saturated to 32 bits


def eltwise_method(node) -> str:
    method = str(node.get_param("method")).upper()
    if method not in FLOAT_ELTWISE:
        raise IRError(f"layer '{node.name}': unsupported Eltwise method '{method}' "
                      f"(supported: {', '.join(FLOAT_ELTWISE)})")
    if len(node.inputs) != 2:
        raise IRError(f"layer '{node.name}': Eltwise takes 2 inputs, the IR gives {len(node.inputs)}")
    return method


def branch_multipliers(ratios, absmaxes, mult_bits: int):
    """Integers M_a, M_b, M_out and a shift >= 0 with M_i * M_out * 2^-shift ~= ratio_i:
    the branch multipliers as large as their caps allow (<= 32767 and |A| * M_a < 2^31),
    one common shift, M_out = 1 unless the ratios need a left shift."""
    cap = min([BRANCH_MULTIPLIER_MAX] + [(BRANCH_PRODUCT_MAX - 1) // max(a, 1) for a in absmaxes])
    ratio_max = max(ratios)
    shift = math.floor(math.log2(cap / ratio_max)) if ratio_max > 0 else 0
    m_out = 1
    if shift < 0:  # the output is far finer than an input: M_out carries the excess
        m_out = min((1 << min(mult_bits, 15)) - 1, 1 << -shift)
        shift = 0
    ms = [max(0, min(cap, int(math.floor(r * 2.0 ** shift / m_out + 0.5)))) for r in ratios]
    return ms, m_out, shift


def branch_reach(t) -> int:
    """Bounds |A| of an input, for the cap of its branch multiplier: its grid's ends; for
    integers that are their own values (qinvariant: an int32 attention mask, counts) the
    calibrated extrema, as an activation's range (beyond them A * M_a saturates at 2^31)."""
    stats = t.statistics
    if t.qinvariant and stats is not None and not stats.empty:
        return int(math.ceil(max(abs(float(stats.min)), abs(float(stats.max)))))
    return QT.shifted_absmax(t)


def eltwise_quantized(node, method):
    a_t, b_t = node.inputs
    out = node.outputs[0]
    a, b = QT.shifted(a_t), QT.shifted(b_t)
    if method == "MUL":
        return fused_forward(node, a * b, Rescale.read(node), out)
    branches = BranchRescales.read(node, 3)
    m_out, m_a, m_b = branches.multipliers
    a = qmath.requantize(a, m_a, 0, 0, -BRANCH_PRODUCT_MAX, BRANCH_PRODUCT_MAX)
    b = qmath.requantize(b, m_b, 0, 0, -BRANCH_PRODUCT_MAX, BRANCH_PRODUCT_MAX)
    return fused_forward(node, FLOAT_ELTWISE[method](a, b), Rescale(m_out, branches.shifts), out)


@op_register(OpType.Eltwise, "1.0")
def eltwise_forward(self, *args):
    method = eltwise_method(self)
    if self.quantized:
        return QT.store_output(self, eltwise_quantized(self, method), self.outputs[0])
    a, b = (t.betensor for t in self.inputs)
    out = apply_fused_activation(self, FLOAT_ELTWISE[method](a, b))
    self.outputs[0].betensor = out
    return out


def reject_all_invariant(node, inputs) -> None:
    """Layers whose inputs are all integer indices (qinvariant) are kept in float by npuopt
    (a trip count computed from a condition: int(c) + 2)."""
    if all(t.qinvariant for t in inputs):
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): every input is an integer (quantization-"
                             f"invariant) tensor; npuopt keeps this layer in float")


@quant_register(OpType.Eltwise, "1.0")
def eltwise_quantize(self, *args):
    method = eltwise_method(self)
    reject_all_invariant(self, self.inputs)
    QT.check_quantized_inputs(self)
    a_t, b_t = self.inputs
    out = self.outputs[0]
    st = settings_of(self)
    QT.quantize_activation(self, out)
    if method == "MUL":
        Rescale.from_ratio(out.scale / (a_t.scale * b_t.scale), st.multiplier_bits).write(self)
    else:
        ratios = [out.scale / a_t.scale, out.scale / b_t.scale]
        absmaxes = [branch_reach(a_t), branch_reach(b_t)]
        (m_a, m_b), m_out, shift = branch_multipliers(ratios, absmaxes, st.multiplier_bits)
        BranchRescales([m_out, m_a, m_b], shift).write(self)
    quantize_fused(self, out)
