"""MatMul: batched matrix product of two inputs, optionally transposing either one's last two axes.

Quantized like Eltwise MUL: acc = A @ B with A = q_a + zp_a, B = q_b + zp_b (exact
integers), then the output stage with one multiplier/shift for s_out / (s_a * s_b)."""
import torch

from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register


def _operands(node, a, b):
    if node.get_param("trans_a", False):
        a = a.transpose(-1, -2)
    if node.get_param("trans_b", False):
        b = b.transpose(-1, -2)
    return a, b


def matmul_quantized(self):
    a_t, b_t = self.inputs
    # |A|, |B| < 2^17: exact in float32; exact_matmul keeps the sums exact
    a, b = _operands(self, QL.shifted_input(a_t, torch.float32), QL.shifted_input(b_t, torch.float32))
    acc = qmath.exact_matmul(a, b, QL.shifted_absmax(a_t))
    M, shift = QL.get_rescale(self)
    bound = float(acc.abs().max()) if acc.numel() else 0.0
    return QL.finish(self, acc, M, shift, self.outputs[0], "NONE", bound=bound)


@op_register(OpType.MatMul, "1.0")
def matmul_forward(self, *args):
    if self.quantized:
        return matmul_quantized(self)
    a, b = _operands(self, *(t.betensor for t in self.inputs))
    out = torch.matmul(a, b)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.MatMul, "1.0")
def matmul_quantize(self, *args):
    QL.quantize_rescaled(self)
