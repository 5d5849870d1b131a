"""Atanh: atanh(x) on the float32 input; as the tool chain computes it, NaN (outside
[-1, 1]) becomes the largest float32 and +-inf (at +-1) the largest float32 of that
sign. Quantized: a lookup table `lut`, indexed as Activation's (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


def atanh(x):
    big = torch.finfo(x.dtype).max
    y = torch.atanh(x)
    return torch.where(torch.isnan(y), torch.full_like(y, big), y).clamp(-big, big)


@quant_register(OpType.Atanh, "1.0")
def atanh_quantize(self, *args):
    _unary.lut_quantize(self, atanh)


@op_register(OpType.Atanh, "1.0")
def atanh_forward(self, *args):
    return _unary.lut_forward(self, atanh)
