"""Rsqrt: 1 / sqrt(x) (inf at 0, NaN below), on the float32 input.
Quantized: a lookup table `lut` indexed from the input's qmin (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Rsqrt, "1.0")
def rsqrt_quantize(self, *args):
    _unary.lut_quantize(self, torch.rsqrt, from_qmin=True)


@op_register(OpType.Rsqrt, "1.0")
def rsqrt_forward(self, *args):
    return _unary.lut_forward(self, torch.rsqrt, from_qmin=True)
