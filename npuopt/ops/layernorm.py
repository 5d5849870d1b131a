"""LayerNorm over the last axes (`axis`), with `weights`/`biases` shaped like them."""
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register
from ._layout import axis_list


@op_register(OpType.LayerNorm, "1.0")
def layernorm_forward(self, *args):
    x = self.inputs[0].betensor
    axes = axis_list(self, "axis", x.dim())
    if axes != list(range(x.dim() - len(axes), x.dim())):
        raise IRError(f"layer '{self.name}': LayerNorm normalizes the last axes only, "
                      f"got axis {self.get_param('axis')} for a {x.dim()}-D input")
    shape = x.shape[axes[0]:]
    weights = self.get_constant("weights").betensor.reshape(shape)
    biases = self.get_constant("biases").betensor.reshape(shape)
    out = F.layer_norm(x, shape, weights, biases, float(self.get_param("epsilon", 1e-5)))
    self.outputs[0].betensor = out
    return out
