"""Mul: a * b with NumPy broadcasting and a fused activation (the parser's form of an
ONNX Mul whose input shapes differ). Float: in float32.

Quantized exactly as Eltwise MUL (A = q_a + zp_a, B = q_b + zp_b):
X = A * B, then the fused activation and the output rescale `scale_value`/`shift_value`."""
from ..registry import OpType, op_register, quant_register
from ._broadcast import arithmetic_forward, arithmetic_quantize


@op_register(OpType.Mul, "1.0")
def mul_forward(self, *args):
    return arithmetic_forward(self, "MUL")


@quant_register(OpType.Mul, "1.0")
def mul_quantize(self, *args):
    arithmetic_quantize(self, "MUL")
