"""Add: a + b with NumPy broadcasting and a fused activation (the parser's form of an
ONNX Add whose input shapes differ). Float: in float32.

Quantized exactly as Eltwise ADD (A = q_a + zp_a, B = q_b + zp_b):
X = A * M_a + B * M_b with `scale_value=[M_out, M_a, M_b]` and one `shift_value`
(each product saturated to 32 bits), then the fused activation and the output rescale."""
from ..registry import OpType, op_register, quant_register
from ._broadcast import arithmetic_forward, arithmetic_quantize


@op_register(OpType.Add, "1.0")
def add_forward(self, *args):
    return arithmetic_forward(self, "ADD")


@quant_register(OpType.Add, "1.0")
def add_quantize(self, *args):
    arithmetic_quantize(self, "ADD")
