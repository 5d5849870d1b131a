"""MatMul: batched matrix product of two inputs, optionally transposing either one's last two axes."""
import torch

from ..registry import OpType, op_register


@op_register(OpType.MatMul, "1.0")
def matmul_forward(self, *args):
    a, b = (t.betensor for t in self.inputs)
    if self.get_param("trans_a", False):
        a = a.transpose(-1, -2)
    if self.get_param("trans_b", False):
        b = b.transpose(-1, -2)
    out = torch.matmul(a, b)
    self.outputs[0].betensor = out
    return out
