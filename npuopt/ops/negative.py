"""Negative: -x. Quantized: exact, q_out = clamp(-(q + zp_in) - zp_out), the input's
scale, a signed output whose zero point keeps every value in range (npuopt/ops/_unary.py)."""
from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Negative, "1.0")
def negative_quantize(self, *args):
    _unary.negative_quantize(self)


@op_register(OpType.Negative, "1.0")
def negative_forward(self, *args):
    return _unary.negative_forward(self)
