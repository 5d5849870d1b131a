"""Asinh: asinh(x), on the float32 input.
Quantized: a lookup table `lut`, indexed as Activation's (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Asinh, "1.0")
def asinh_quantize(self, *args):
    _unary.lut_quantize(self, torch.asinh)


@op_register(OpType.Asinh, "1.0")
def asinh_forward(self, *args):
    return _unary.lut_forward(self, torch.asinh)
