"""Constant: hands on its `weights` (batch 1; consumers broadcast it over the batch).

Quantized: the top is quantized like an activation whose range is the extrema of
the values (an attention mask's "minus infinity" left out: quant/statistics.py; a mask's
range reaches down to the one calibration planned for it), and `weights` stores the
integers themselves (the forward hands them on); integer-valued
constants (indices) are left as they are (qinvariant)."""
import torch

from ..quant import minifloat, qmath
from ..quant import tensors as QT
from ..quant.statistics import usable
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Constant, "1.0")
def constant_forward(self, *args):
    out = self.get_constant("weights").betensor
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Constant, "1.0")
def constant_quantize(self, *args):
    c, out = self.get_constant("weights"), self.outputs[0]
    if not c.betensor.is_floating_point():
        out.qinvariant, out.scale, out.zerop, out.qbits = True, 1.0, 0, out.dtype.bits
        out.qmin, out.qmax = out.dtype.qmin, out.dtype.qmax
        return
    v = c.betensor.detach().to(torch.float32)
    ok = usable(v)  # an attention mask's -inf or float32's lowest saturates at the grid's bottom
    finite = v if bool(ok.all()) else v[ok]
    del ok
    lo, hi = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 0.0)
    if finite.numel() < v.numel() and out.planned_range is not None:  # a mask (calibration.plan_mask_ranges)
        lo, hi = min(lo, out.planned_range[0]), max(hi, out.planned_range[1])
    QT.quantize_activation(self, out, lo, hi)
    if out.dtype.is_minifloat:  # rounded to the format (the tool chain rounds to integers first, then to fp8)
        c.betensor = minifloat.quantize(v, out.scale, out.dtype.value)
    else:
        c.betensor = qmath.quantize(v, out.scale, out.zerop, out.qmin, out.qmax).to(out.dtype.torch_dtype)
    QT.copy_quantization(out, c)
