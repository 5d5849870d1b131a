"""Div: a / b with NumPy broadcasting (true division in float32, also of integer inputs,
as the tool chain computes it).

Quantized, the tool chain's form: X = q_a + zp_a, Y = q_b + zp_b, the reciprocal of
|Y| read from a uint16 table `lut` (entry i = round(65535 / v_i) at the 2^k points
v_i = linspace(0, 2^bits_b - 1) with entry 0 = 0, so a zero divisor gives 0;
k = min(bits_b, lut_items_in_bits), interpolated by qmath.lut_lookup),
Z = sign(Y) * X * lut(|Y|) (sign(0) = +1), out = requantize(Z, `scale_value`,
`shift_value`) for s_out * s_b / (s_a * 65535)."""
import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs, check_quantized_operands, float_operands, requantize_into

RECIPROCAL_ONE = (1 << 16) - 1   # the table's fixed-point 1
LUT_DTYPE = Dtype.UINT16


def reciprocal_table(divisor_bits: int, lut_bits: int) -> torch.Tensor:
    """65535 / v at 2^min(divisor_bits, lut_bits) points spread over [0, 2^divisor_bits - 1]
    (float32, as the tool chain builds it), entry 0 (a zero divisor) set to 0."""
    points = torch.linspace(0, (1 << divisor_bits) - 1, steps=1 << min(divisor_bits, lut_bits))
    table = torch.round(RECIPROCAL_ONE / points).clamp(0, RECIPROCAL_ONE)
    table[0] = 0
    return table


def div_quantized(node):
    a_t, b_t = node.inputs
    check_quantized_operands(node)
    x, y = QT.shifted(a_t), QT.shifted(b_t)
    table, dtype = fields.read_lut(node)
    reciprocal = qmath.lut_lookup(y.abs().to(torch.int64), table, b_t.qbits, dtype.bits, dtype.is_signed)
    sign = torch.where(y < 0, -1.0, 1.0).to(torch.float64)
    return requantize_into(node, sign * x * reciprocal.to(torch.float64), Rescale.read(node))


@op_register(OpType.Div, "1.0")
def div_forward(self, *args):
    check_inputs(self, (2,))
    if self.quantized:
        return div_quantized(self)
    a, b = float_operands(self)
    self.outputs[0].betensor = a / b
    return self.outputs[0].betensor


@quant_register(OpType.Div, "1.0")
def div_quantize(self, *args):
    check_inputs(self, (2,))
    QT.check_quantized_inputs(self)
    a_t, b_t = self.inputs
    out = self.outputs[0]
    st = settings_of(self)
    QT.quantize_activation(self, out)
    fields.write_lut(self, reciprocal_table(b_t.qbits, st.lut_items_in_bits), LUT_DTYPE)
    ratio = out.scale * b_t.scale / (a_t.scale * RECIPROCAL_ONE)
    Rescale.from_ratio(ratio, st.multiplier_bits).write(self)
