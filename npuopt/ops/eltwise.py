"""Eltwise: elementwise ADD/SUB/MUL/MAX/MIN of two inputs, with broadcasting."""
import torch

from ..errors import IRError
from ..registry import OpType, op_register
from .activation import apply_fused_activation

FLOAT_ELTWISE = {
    "ADD": torch.add,
    "SUB": torch.sub,
    "MUL": torch.mul,
    "MAX": torch.maximum,
    "MIN": torch.minimum,
}


def eltwise_method(node) -> str:
    method = str(node.get_param("method")).upper()
    if method not in FLOAT_ELTWISE:
        raise IRError(f"layer '{node.name}': unsupported Eltwise method '{method}' "
                      f"(supported: {', '.join(FLOAT_ELTWISE)})")
    if len(node.inputs) != 2:
        raise IRError(f"layer '{node.name}': Eltwise takes 2 inputs, the IR gives {len(node.inputs)}")
    return method


@op_register(OpType.Eltwise, "1.0")
def eltwise_forward(self, *args):
    a, b = (t.betensor for t in self.inputs)
    out = apply_fused_activation(self, FLOAT_ELTWISE[eltwise_method(self)](a, b))
    self.outputs[0].betensor = out
    return out
