"""Log: ln(x) (-inf at 0, NaN below), on the float32 input.
Quantized: a lookup table `lut`, indexed as Activation's (npuopt/ops/_unary.py)."""
import torch

from ..registry import OpType, op_register, quant_register
from . import _unary


@quant_register(OpType.Log, "1.0")
def log_quantize(self, *args):
    _unary.lut_quantize(self, torch.log)


@op_register(OpType.Log, "1.0")
def log_forward(self, *args):
    return _unary.lut_forward(self, torch.log)
