"""Softmax along `axis` (default: the last)."""
import torch

from ..registry import OpType, op_register


@op_register(OpType.Softmax, "1.0")
def softmax_forward(self, *args):
    out = torch.softmax(self.inputs[0].betensor, dim=int(self.get_param("axis", -1)))
    self.outputs[0].betensor = out
    return out
