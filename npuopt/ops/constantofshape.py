"""ConstantOfShape: a tensor of the shape input 0 holds (integers), every element
`value` (int32 for an integer value, else float32).

Quantized: an integral (or non-finite) value keeps its integer (scale 1, zp 0,
qinvariant; signed when negative, activation_bits wide, saturated); another value
gets the activation quantization of the range [-|value|, |value|] (signed when the
value is negative), and `value` becomes the stored integer, as the tool chain does."""
import math

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._movement import integers, set_output



def _value(node):
    value = node.get_param("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IRError(f"layer '{node.name}' (ConstantOfShape): value must be a number, got {value!r}")
    return value


@op_register(OpType.ConstantOfShape, "1.0")
def constantofshape_forward(self, *args):
    shape = integers(self, self.inputs[0].betensor.reshape(-1), "the shape")
    if (shape < 0).any():
        raise IRError(f"layer '{self.name}' (ConstantOfShape): negative size in shape {shape.tolist()}")
    value = _value(self)
    if self.quantized:
        return QT.store_output(self, torch.full(shape.tolist(), float(value)), self.outputs[0])
    dtype = torch.int32 if isinstance(value, int) else torch.float32
    return set_output(self, torch.full(shape.tolist(), value, dtype=dtype))


@quant_register(OpType.ConstantOfShape, "1.0")
def constantofshape_quantize(self, *args):
    out, value = self.outputs[0], float(_value(self))
    bits, signed = settings_of(self).activation_bits, value < 0
    if not math.isfinite(value) or value == math.floor(value):
        dtype = Dtype.integer(bits, signed)
        QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, bits, signed)
        out.qinvariant = True
    else:
        QT.quantize_activation(self, out, -abs(value), abs(value), signed=signed)
    q = qmath.quantize(torch.tensor([value]), out.scale, out.zerop, out.qmin, out.qmax)
    self.params["value"] = int(q[0])
