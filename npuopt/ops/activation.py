"""Activation layers, and the fused activation (`with_activation`) other layers apply."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register


def _clip(node, x):
    return torch.clamp(x, float(node.get_param("clip_min")), float(node.get_param("clip_max")))


def _leaky(node, x):
    return F.leaky_relu(x, float(node.get_param("negative_slope_value", 0.01)))


FLOAT_ACTIVATIONS = {
    "NONE": lambda node, x: x,
    "RELU": lambda node, x: F.relu(x),
    "RELU6": lambda node, x: F.relu6(x),
    "CLIP": _clip,
    "LEAKYRELU": _leaky,
    "SIGMOID": lambda node, x: torch.sigmoid(x),
    "TANH": lambda node, x: torch.tanh(x),
    "SWISH": lambda node, x: F.silu(x),
    "SILU": lambda node, x: F.silu(x),
    "HARDSIGMOID": lambda node, x: torch.clamp(x * float(node.get_param("alpha", 1 / 6)) + float(node.get_param("beta", 0.5)), 0.0, 1.0),
    "HARDSWISH": lambda node, x: F.hardswish(x),
    "GELU": lambda node, x: F.gelu(x, approximate="tanh" if node.get_param("approximate", "none") == "tanh" else "none"),
}


def float_activation(node, x: torch.Tensor, method: str) -> torch.Tensor:
    fn = FLOAT_ACTIVATIONS.get(str(method).upper())
    if fn is None:
        raise IRError(f"layer '{node.name}': unsupported activation '{method}' "
                      f"(supported: {', '.join(sorted(FLOAT_ACTIVATIONS))})")
    return fn(node, x)


def apply_fused_activation(node, x: torch.Tensor) -> torch.Tensor:
    """The `with_activation` a Convolution, FullyConnected or Eltwise carries."""
    return float_activation(node, x, node.get_param("with_activation", "NONE"))


@op_register(OpType.Activation, "1.0")
def activation_forward(self, *args):
    out = float_activation(self, self.inputs[0].betensor, self.get_param("method"))
    self.outputs[0].betensor = out
    return out
