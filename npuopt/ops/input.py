"""Input: the graph feeds its value; the layer only hands it on.

Quantized: a float value fed to the graph is quantized with the top's scale and
zero point (q = round_half_up(f * scale - zp), in float32, saturated); an integer
value is taken as already quantized."""
from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Input, "1.0")
def input_forward(self, *args):
    t = self.outputs[0]
    if self.quantized and t.betensor.is_floating_point():
        lo, hi = QL.int_range(t)
        t.betensor = qmath.quantize(t.betensor, t.scale, t.zerop, lo, hi, t.dtype.torch_dtype)
    return t.betensor


@quant_register(OpType.Input, "1.0")
def input_quantize(self, *args):
    QL.quantize_activation(self, self.outputs[0])
