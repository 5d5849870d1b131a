"""BatchNorm as the IR keeps it: y = x·weights + biases along `axis`, statistics already folded."""
import torch

from ..errors import IRError
from ..registry import OpType, op_register
from ._layout import along_axis


@op_register(OpType.BatchNorm, "1.0")
def batchnorm_forward(self, *args):
    x = self.inputs[0].betensor
    axis = int(self.get_param("axis", -1))
    scale = self.get_constant("weights").betensor
    shift = self.get_constant("biases").betensor
    if scale.numel() != x.shape[axis] or shift.numel() != x.shape[axis]:
        raise IRError(f"layer '{self.name}': weights/biases of {scale.numel()}/{shift.numel()} values "
                      f"for axis {axis} of size {x.shape[axis]}")
    # one fused kernel, output in the input's memory layout
    out = torch.addcmul(along_axis(shift, axis, x.dim()), x, along_axis(scale, axis, x.dim()))
    self.outputs[0].betensor = out
    return out
