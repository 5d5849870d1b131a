"""Quantize: a float tensor (from a layer kept in float) into integers, at the
boundary of a mixed-precision graph: q = round_half_up(f * scale - zp) in float32,
saturated to the top's dtype (scale/zp: the top's layer_top_scale/zp)."""
from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Quantize, "1.0")
def quantize_forward(self, *args):
    x, out = self.inputs[0].betensor, self.outputs[0]
    if self.quantized and x.is_floating_point():
        lo, hi = QL.int_range(out)
        out.betensor = qmath.quantize(x, out.scale, out.zerop, lo, hi, out.dtype.torch_dtype)
    else:
        out.betensor = x
    return out.betensor


@quant_register(OpType.Quantize, "1.0")
def quantize_quantize(self, *args):
    QL.quantize_activation(self, self.outputs[0])
