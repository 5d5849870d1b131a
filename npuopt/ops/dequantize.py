"""DeQuantize: integers back to float32 for a layer kept in float:
f = (q + zp) * (1 / scale) in float32, with the input's layer_top_scale/zp."""
from ..quant import qmath
from ..registry import OpType, op_register


@op_register(OpType.DeQuantize, "1.0")
def dequantize_forward(self, *args):
    x_t, out = self.inputs[0], self.outputs[0]
    x = x_t.betensor
    quantized = x_t.dtype.is_minifloat or not x.is_floating_point()
    out.betensor = qmath.dequantize(x, x_t.scale, x_t.zerop) if quantized else x
    return out.betensor
