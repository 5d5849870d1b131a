"""Input: the graph feeds its value; the layer only hands it on.

Quantized: a float value fed to the graph is quantized with the top's scale and
zero point, q = round_half_even(fl32(fl32(scale * f) - zp)) saturated to the
top's range (NaN gives 0); an integer value is taken as already quantized.
Integer graph inputs (indices) are not scaled (qinvariant). In an fp8 format the
top holds round_to(fl32(scale * f)) of the float value fed (quant/minifloat.py)."""
from ..quant import minifloat, qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Input, "1.0")
def input_forward(self, *args):
    t = self.outputs[0]
    if self.quantized and t.dtype.is_minifloat and t.betensor.is_floating_point():
        QT.store_output(self, minifloat.quantize(t.betensor, t.scale, t.dtype.value), t)
    elif self.quantized and t.betensor.is_floating_point() and not t.qinvariant:
        QT.store_output(self, qmath.quantize(t.betensor, t.scale, t.zerop, t.qmin, t.qmax), t)
    return t.betensor


@quant_register(OpType.Input, "1.0")
def input_quantize(self, *args):
    t = self.outputs[0]
    if t.dtype.is_integer or t.qinvariant:
        t.qinvariant, t.scale, t.zerop, t.qbits = True, 1.0, 0, t.dtype.bits
        t.qmin, t.qmax = t.dtype.qmin, t.dtype.qmax
        return
    QT.quantize_activation(self, t)
