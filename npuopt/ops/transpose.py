"""Transpose by `perm`."""
from ..errors import IRError
from ..registry import OpType, op_register


@op_register(OpType.Transpose, "1.0")
def transpose_forward(self, *args):
    perm = self.get_param("perm")
    x = self.inputs[0].betensor
    if sorted(perm) != list(range(x.dim())):
        raise IRError(f"layer '{self.name}': perm {perm} is not a permutation of {x.dim()} axes")
    out = x.permute(*perm)
    self.outputs[0].betensor = out
    return out
