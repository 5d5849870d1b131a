"""Reduce MEAN/SUM/MAX/MIN over a list of axes (global average pooling is MEAN over [1, 2]).

Quantized MAX/MIN: the max/min of the integers, quantization passed through.
Quantized MEAN/SUM: S = sum of (q + zp_in) over the axes, then the averaging output
stage (npuopt.quant.layers.finish_mean) with M/shift the rescale s_out / s_in and n the
number of reduced elements (MEAN) or 1 (SUM)."""
import math

import torch

from ..quant import tensors as QT
from ..quant import layers as QL  # noqa: F401  (being ported)
from ..registry import OpType, op_register, quant_register
from ._layout import axis_list, param_choice

FLOAT_REDUCE = {
    "MEAN": torch.mean,
    "SUM": torch.sum,
    "MAX": torch.amax,
    "MIN": torch.amin,
}

PASS_THROUGH = ("MAX", "MIN")


def reduce_method(node) -> str:
    return param_choice(node, "method", list(FLOAT_REDUCE))


def reduce_quantized(self, method, axes, keepdims):
    x_t, out_t = self.inputs[0], self.outputs[0]
    if method in PASS_THROUGH:
        return QL.store_output(self, FLOAT_REDUCE[method](x_t.betensor, dim=axes, keepdim=keepdims), out_t)
    sums = QL.shifted_input(x_t).sum(dim=axes, keepdim=keepdims)
    count = math.prod(x_t.betensor.shape[a] for a in axes) if method == "MEAN" else 1
    return QL.finish_mean(self, sums, count, out_t)


@op_register(OpType.Reduce, "1.0")
def reduce_forward(self, *args):
    x = self.inputs[0].betensor
    method = reduce_method(self)
    axes = axis_list(self, "axis", x.dim())
    keepdims = bool(self.get_param("keepdims", True))
    if self.quantized:
        return reduce_quantized(self, method, axes, keepdims)
    out = FLOAT_REDUCE[method](x, dim=axes, keepdim=keepdims)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Reduce, "1.0")
def reduce_quantize(self, *args):
    raise QT.Unsupported(f"layer '{self.name}' ({self.type}): quantized form not ported to the tool chain's format yet")
    if reduce_method(self) in PASS_THROUGH:
        QL.pass_through(self)
        return
    QL.quantize_rescaled(self)
