"""Concat along `axis`."""
import torch

from ..registry import OpType, op_register


@op_register(OpType.Concat, "1.0")
def concat_forward(self, *args):
    out = torch.cat([t.betensor for t in self.inputs], dim=int(self.get_param("axis")))
    self.outputs[0].betensor = out
    return out
