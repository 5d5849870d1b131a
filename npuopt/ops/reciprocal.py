"""Reciprocal: 1 / x (+-inf at 0), on the float32 input.
Quantized: a lookup table `lut` indexed from the input's qmin (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Reciprocal, "1.0")
def reciprocal_quantize(self, *args):
    _unary.lut_quantize(self, torch.reciprocal, from_qmin=True)


@op_register(OpType.Reciprocal, "1.0")
def reciprocal_forward(self, *args):
    return _unary.lut_forward(self, torch.reciprocal, from_qmin=True)
