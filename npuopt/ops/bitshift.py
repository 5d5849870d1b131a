"""BitShift: input 0's integers shifted by input 1's (NumPy broadcasting), `direction`
LEFT or RIGHT, as the tool chain computes it in input 0's type of b bits:
LEFT keeps the low b bits of x * 2^s, read in that type (two's complement), and gives 0
for a shift outside [0, b); RIGHT is the arithmetic shift (sign bits come in; a shift
outside [0, 64) gives -1 for a negative x, else 0). The result then fits the top's type
(clamped), as every top of the tool chain's forward.

Quantized only on integers (qinvariant inputs, as the tool chain): the top keeps the
float IR's integer type with scale 1, zero point 0; the forward is the same."""
import torch

from ..registry import OpType, op_register, quant_register
from ._integer import fit_top, integer_inputs_only, integer_operands, original_integer_top, wrap
from ._layout import param_choice

INT64_BITS = 64


def shifted(x: torch.Tensor, s: torch.Tensor, direction: str, dtype) -> torch.Tensor:
    """x shifted by s (int64 tensors) in `dtype`'s width, as described above."""
    x, s = torch.broadcast_tensors(x, s)
    if direction == "LEFT":
        inside = (s >= 0) & (s < dtype.bits)
        low = (x << torch.where(inside, s, 0)) & ((1 << dtype.bits) - 1)
        return torch.where(inside, wrap(low, dtype), 0)
    return x >> torch.where((s >= 0) & (s < INT64_BITS), s, INT64_BITS - 1)


@op_register(OpType.BitShift, "1.0")
def bitshift_forward(self, *args):
    direction = param_choice(self, "direction", ["LEFT", "RIGHT"])
    x, s = integer_operands(self)
    dtype = self.inputs[0].dtype
    return fit_top(self.outputs[0], shifted(x, s, direction, dtype), dtype)


@quant_register(OpType.BitShift, "1.0")
def bitshift_quantize(self, *args):
    integer_inputs_only(self)
    original_integer_top(self.outputs[0], self.inputs[0].dtype)
