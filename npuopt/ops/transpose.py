"""Transpose by `perm`.

Quantized: the same integers, the input's quantization passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


@op_register(OpType.Transpose, "1.0")
def transpose_forward(self, *args):
    perm = self.get_param("perm")
    x = self.inputs[0].betensor
    if sorted(perm) != list(range(x.dim())):
        raise IRError(f"layer '{self.name}': perm {perm} is not a permutation of {x.dim()} axes")
    out = x.permute(*perm)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Transpose, "1.0")
def transpose_quantize(self, *args):
    QT.pass_through(self)
