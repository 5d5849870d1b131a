"""IsNaN: 1 where the input is NaN, else 0; the top is uint8.

Quantized as the tool chain: the input as any activation, the top uint8 0/1 (scale 1,
zero point 0); an integer is never NaN, so the quantized top is 0 everywhere."""
import torch

from ..registry import OpType, op_register, quant_register
from ._integer import mask_quantize, set_mask
from ._unary import operands


@op_register(OpType.IsNaN, "1.0")
def isnan_forward(self, *args):
    return set_mask(self, torch.isnan(operands(self)[0].betensor))


@quant_register(OpType.IsNaN, "1.0")
def isnan_quantize(self, *args):
    mask_quantize(self)
