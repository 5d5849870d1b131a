"""Bitwise: `method` AND, OR, XOR (two integer inputs, NumPy broadcasting) or NOT (one), on
the integers' two's-complement bits, as the tool chain computes it: in NumPy's common type
of the inputs, then wrapped (a C cast) into the top's integer type.

Quantized only on integers (qinvariant inputs, as the tool chain): the top keeps the
float IR's integer type with scale 1, zero point 0; the forward is the same."""
import torch

from ..registry import OpType, op_register, quant_register
from ._integer import fit_top, integer_inputs_only, integer_operands, original_integer_top, promoted, wrap
from ._layout import param_choice

BINARY = {"AND": torch.bitwise_and, "OR": torch.bitwise_or, "XOR": torch.bitwise_xor}


@op_register(OpType.Bitwise, "1.0")
def bitwise_forward(self, *args):
    method = param_choice(self, "method", list(BINARY) + ["NOT"])
    xs = integer_operands(self, (1,) if method == "NOT" else (2,))
    y = torch.bitwise_not(xs[0]) if method == "NOT" else BINARY[method](*xs)
    out = self.outputs[0]
    natural = promoted(*(t.dtype for t in self.inputs))
    y = wrap(y, natural)  # NOT of an unsigned type stays unsigned
    return fit_top(out, wrap(y, out.dtype) if out.dtype.is_integer else y, natural)


@quant_register(OpType.Bitwise, "1.0")
def bitwise_quantize(self, *args):
    integer_inputs_only(self)
    original_integer_top(self.outputs[0], promoted(*(t.dtype for t in self.inputs)))
