"""Abs: |x|. Quantized: |q + zp_in| rescaled into an unsigned output (`scale_value`/
`shift_value`); an integer-valued input keeps its quantization and |q| is exact
(npuopt/ops/_unary.py)."""
from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Abs, "1.0")
def abs_quantize(self, *args):
    _unary.abs_quantize(self)


@op_register(OpType.Abs, "1.0")
def abs_forward(self, *args):
    return _unary.abs_forward(self)
