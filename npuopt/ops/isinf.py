"""IsInf: 1 where the input is +inf (with `detect_positive`, default true) or -inf (with
`detect_negative`, default true), else 0; the top is uint8.

Quantized as the tool chain: the input as any activation, the top uint8 0/1 (scale 1,
zero point 0); an integer holds no infinity, so the quantized top is 0 everywhere."""
import torch

from ..registry import OpType, op_register, quant_register
from ._integer import mask_quantize, set_mask
from ._movement import bool_param
from ._unary import operands


@op_register(OpType.IsInf, "1.0")
def isinf_forward(self, *args):
    positive, negative = bool_param(self, "detect_positive", True), bool_param(self, "detect_negative", True)
    x = operands(self)[0].betensor
    mask = torch.zeros_like(x, dtype=torch.bool)
    if positive:
        mask |= torch.isposinf(x)
    if negative:
        mask |= torch.isneginf(x)
    return set_mask(self, mask)


@quant_register(OpType.IsInf, "1.0")
def isinf_quantize(self, *args):
    mask_quantize(self)
