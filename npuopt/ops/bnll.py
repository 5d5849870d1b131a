"""BNLL: log(1 + e^x), computed in float64 as x + log(1 + e^-x) for x > 0 and
log(1 + e^x) otherwise, then float32. Quantized: a lookup table `lut` indexed from
the input's qmin (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


def bnll(x):
    d = x.double()
    y = torch.where(d > 0, d + torch.log(1 + torch.exp(-d)), torch.log(1 + torch.exp(d)))
    return y.to(x.dtype)


@quant_register(OpType.BNLL, "1.0")
def bnll_quantize(self, *args):
    _unary.lut_quantize(self, bnll, from_qmin=True)


@op_register(OpType.BNLL, "1.0")
def bnll_forward(self, *args):
    return _unary.lut_forward(self, bnll, from_qmin=True)
