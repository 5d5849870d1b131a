"""Reduce MEAN/SUM/MAX/MIN over a list of axes (global average pooling is MEAN over [1, 2])."""
import torch

from ..registry import OpType, op_register
from ._layout import axis_list, param_choice

FLOAT_REDUCE = {
    "MEAN": torch.mean,
    "SUM": torch.sum,
    "MAX": torch.amax,
    "MIN": torch.amin,
}


@op_register(OpType.Reduce, "1.0")
def reduce_forward(self, *args):
    x = self.inputs[0].betensor
    reduce = FLOAT_REDUCE[param_choice(self, "method", list(FLOAT_REDUCE))]
    out = reduce(x, dim=axis_list(self, "axis", x.dim()), keepdim=bool(self.get_param("keepdims", True)))
    self.outputs[0].betensor = out
    return out
