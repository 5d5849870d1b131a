"""What the control-flow layers (If, Loop) share: their subgraphs' sizes and their
condition and count inputs checked against their params as one-line IRErrors (they run
a subgraph with PyGraph.run_subgraph).

The tool chain keeps these layers and the subgraphs they run in float (quantized
graphs: in the cfg's float mode, float16 by default; quant/settings.py), so they have
no quantize function and no integer forward."""
import torch

from ..errors import IRError
from ._movement import int_param


def count_param(node, key: str) -> int:
    return int_param(node, key, minimum=0)


def one_value(node, t, what: str) -> torch.Tensor:
    """The one value of a condition or count input."""
    if t.betensor.numel() != 1:
        raise IRError(f"layer '{node.name}' ({node.type}): {what} '{t.name}' holds {t.betensor.numel()} values, "
                      f"not one")
    return t.betensor.reshape(-1)[0]


def subgraph(node, key: str, inputs: int, outputs: int, what: str):
    """The subgraph param `key` names, with `inputs` inputs and `outputs` outputs (`what`
    says where those counts come from)."""
    sg = node.get_sub_graph(key)
    for kind, have, want in (("inputs", len(sg.input_tensors), inputs), ("outputs", len(sg.output_tensors), outputs)):
        if have != want:
            raise IRError(f"layer '{node.name}' ({node.type}): {key} '{sg.name}' has {have} {kind}; {what} "
                          f"give {want}")
    return sg

