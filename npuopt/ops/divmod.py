"""DivMod: two tops, the quotient and the remainder of input 0 by input 1 (integers, NumPy
broadcasting), `mode` FLOOR (default; rounding toward -inf, the remainder takes the
divisor's sign) or TRUNC (toward 0, the dividend's sign): r = a - b * q. A zero divisor
gives 0 in both tops. Each top then fits its integer type (clamped), as the tool chain's
forward does (int8 -128 // -1 gives 127). Float inputs are truncated to integers first,
as the tool chain takes them.

Quantized only on integers (qinvariant inputs): as the tool chain, both tops take input
0's integer type with scale 1, zero point 0; the forward is the same."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs
from ._integer import fit_top, integer_inputs_only, integer_top
from ._layout import param_choice


@op_register(OpType.DivMod, "1.0")
def divmod_forward(self, *args):
    mode = param_choice(self, "mode", ["FLOOR", "TRUNC"], "FLOOR")
    check_inputs(self, (2,))
    if len(self.outputs) != 2:
        raise IRError(f"layer '{self.name}' ({self.type}): gives 2 tops (quotient, remainder), the IR has "
                      f"{len(self.outputs)}")
    a, b = (t.betensor.to(torch.int64) for t in self.inputs)
    broadcast_shape(self, a, b)
    a, b = torch.broadcast_tensors(a, b)
    nonzero = b != 0
    q = torch.div(a, torch.where(nonzero, b, 1), rounding_mode=mode.lower())
    q = torch.where(nonzero, q, 0)
    r = torch.where(nonzero, a - b * q, 0)
    natural = self.inputs[0].dtype if self.inputs[0].dtype.is_integer else Dtype.INT32
    return [fit_top(t, v, natural) for t, v in zip(self.outputs, (q, r))]


@quant_register(OpType.DivMod, "1.0")
def divmod_quantize(self, *args):
    integer_inputs_only(self)
    inp = self.inputs[0]
    for t in self.outputs:
        integer_top(t, inp.ir_dtype if inp.ir_dtype.is_integer else inp.dtype)
