"""Sign: -1, 0 or 1. Quantized: sign(q + zp_in) as integers of scale 1 (npuopt/ops/_unary.py)."""
from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Sign, "1.0")
def sign_quantize(self, *args):
    _unary.sign_quantize(self)


@op_register(OpType.Sign, "1.0")
def sign_forward(self, *args):
    return _unary.sign_forward(self)
