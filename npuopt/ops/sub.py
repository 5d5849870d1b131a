"""Sub: a - b with NumPy broadcasting and a fused activation (the parser's form of an
ONNX Sub whose input shapes differ). Float: in float32.

Quantized exactly as Eltwise SUB (A = q_a + zp_a, B = q_b + zp_b):
X = A * M_a - B * M_b with `scale_value=[M_out, M_a, M_b]` and one `shift_value`
(each product saturated to 32 bits), then the fused activation and the output rescale."""
from ..registry import OpType, op_register, quant_register
from ._broadcast import arithmetic_forward, arithmetic_quantize


@op_register(OpType.Sub, "1.0")
def sub_forward(self, *args):
    return arithmetic_forward(self, "SUB")


@quant_register(OpType.Sub, "1.0")
def sub_quantize(self, *args):
    arithmetic_quantize(self, "SUB")
