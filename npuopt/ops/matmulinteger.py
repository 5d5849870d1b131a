"""MatMulInteger: ONNX's integer matrix product as the parser writes it. Two integer
inputs A and B (uint8 or int8, numpy's matmul broadcasting) and the zero points
`a_zero_point` and `b_zero_point`; the int32 top holds (A - a_zero_point) @
(B - b_zero_point), computed exactly.

Quantized, as the tool chain quantizes it: the same integers. Both inputs must hold
integers as they are (qinvariant: graph inputs or constants of integers, or a
pre-quantized source's integers), else the layer stays float (the tool chain stops);
the top is int32 with scale 1, zero point 0; nothing is rescaled."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._prequant import int32_quantization, integer_operands, integer_top, source_integers, zero_point


@op_register(OpType.MatMulInteger, "1.0")
def matmulinteger_forward(self, *args):
    a, b = integer_operands(self, 2)
    a = a - zero_point(self, "a_zero_point", self.inputs[0].dtype)
    b = b - zero_point(self, "b_zero_point", self.inputs[1].dtype)
    try:
        fits = a.dim() >= 2 and b.dim() >= 2 and a.shape[-1] == b.shape[-2] and \
            torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) is not None
    except RuntimeError:
        fits = False
    if not fits:
        raise IRError(f"layer '{self.name}' (MatMulInteger): inputs {list(a.shape)} and {list(b.shape)} do not "
                      f"fit a matrix product (2 or more axes each, A's columns B's rows, batch axes that broadcast)")
    return integer_top(self, qmath.exact_matmul(a, b))


@quant_register(OpType.MatMulInteger, "1.0")
def matmulinteger_quantize(self, *args):
    """As the tool chain's: integer inputs as they are, an int32 top (module docstring)."""
    if settings_of(self).quantize_method_for_activation.per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (MatMulInteger): per-channel activations are not supported")
    for t in self.inputs:
        if not (t.qinvariant or source_integers(t)):
            raise QT.Unsupported(f"layer '{self.name}' (MatMulInteger): input '{t.name}' is not integers as they "
                                 f"are (the tool chain quantizes it only with qinvariant inputs)")
    int32_quantization(self.outputs[0])
