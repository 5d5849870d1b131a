"""Sqrt: sqrt(x) (NaN below 0), on the float32 input.
Quantized: a lookup table `lut` indexed from the input's qmin (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Sqrt, "1.0")
def sqrt_quantize(self, *args):
    _unary.lut_quantize(self, torch.sqrt, from_qmin=True)


@op_register(OpType.Sqrt, "1.0")
def sqrt_forward(self, *args):
    return _unary.lut_forward(self, torch.sqrt, from_qmin=True)
