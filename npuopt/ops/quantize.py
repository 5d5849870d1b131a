"""Quantize: a float tensor (from a layer kept in float) into integers, at the
boundary of a mixed-precision graph: q = round_half_even(fl32(fl32(scale * f) - zp)),
saturated to the top's range (scale/zp: the top's layer_top_scale/zp); into an fp8
top, round_to(fl32(scale * f)) (quant/minifloat.py). A pre-quantized source's Quantize
whose integers an integer layer reads (ir/compat.py) quantizes in the float model too."""
from ..quant import minifloat, qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Quantize, "1.0")
def quantize_forward(self, *args):
    x, out = self.inputs[0].betensor, self.outputs[0]
    if self.quantized and out.dtype.is_minifloat:
        return QT.store_output(self, minifloat.quantize(x, out.scale, out.dtype.value), out)
    if (self.quantized or out.source_grid is not None and out.dtype.is_integer) and x.is_floating_point():
        return QT.store_output(self, qmath.quantize(x, out.scale, out.zerop, out.qmin, out.qmax), out)
    out.betensor = x
    return x


@quant_register(OpType.Quantize, "1.0")
def quantize_quantize(self, *args):
    QT.quantize_activation(self, self.outputs[0])
    self.params["round_mode"] = "ROUND_TO_EVEN"
