"""Cosine: cos(x), on the float32 input.
Quantized: on 8-bit inputs a lookup table `lut` indexed from the input's qmin; on wider
inputs a rescale to table steps, modulo one period held in `lut` (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Cosine, "1.0")
def cosine_quantize(self, *args):
    _unary.periodic_quantize(self, torch.cos)


@op_register(OpType.Cosine, "1.0")
def cosine_forward(self, *args):
    return _unary.periodic_forward(self, torch.cos)
