"""Asin: asin(x) on the float32 input; outside [-1, 1] the tool chain gives 2^31 - 1
instead of NaN. Quantized: a lookup table `lut`, indexed as Activation's
(npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary

OUT_OF_DOMAIN = float(2 ** 31 - 1)


def asin(x):
    y = torch.asin(x)
    return torch.where(torch.isnan(y), torch.full_like(y, OUT_OF_DOMAIN), y)


@quant_register(OpType.Asin, "1.0")
def asin_quantize(self, *args):
    _unary.lut_quantize(self, asin)


@op_register(OpType.Asin, "1.0")
def asin_forward(self, *args):
    return _unary.lut_forward(self, asin)
