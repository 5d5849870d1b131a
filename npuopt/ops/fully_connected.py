"""FullyConnected: y = x·Wᵀ + b over the last axis (weights [out, in]), leading axes kept."""
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register
from ._layout import optional_constant
from .activation import apply_fused_activation


@op_register(OpType.FullyConnected, "1.0")
def fully_connected_forward(self, *args):
    x = self.inputs[0].betensor
    weights = self.get_constant("weights").betensor
    if x.shape[-1] != weights.shape[1]:
        raise IRError(f"layer '{self.name}': input has {x.shape[-1]} features on its last axis, "
                      f"weights {list(weights.shape)} expect {weights.shape[1]}")
    out = apply_fused_activation(self, F.linear(x, weights, optional_constant(self, "biases")))
    self.outputs[0].betensor = out
    return out
