"""GraphBuilder: make a float IR in code (exporter, generators, tests).

Each added layer runs its registered forward on the example values, so the
top shapes are computed, not typed in, and a wrong param fails at once.
"""
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import torch

from ..dtype import Dtype
from ..errors import GraphError
from ..graph import QuantizeGraph, check_shape
from ..node import PyNode
from ..registry import has_data_dependent_shapes
from ..tensor import PyTensor


class GraphBuilder:
    def __init__(self, name: str):
        import npuopt.ops  # noqa: F401  (forwards must be registered to infer shapes)
        self.name = name
        self.nodes: List[PyNode] = []
        self.tensors: Dict[str, PyTensor] = {}
        self.inputs: List[str] = []

    def input(self, name: str, shape: Sequence[int], example: Optional[torch.Tensor] = None,
              dtype: Dtype = Dtype.FP32) -> str:
        value = example if example is not None else torch.zeros(tuple(shape), dtype=dtype.torch_dtype)
        node = PyNode(name, "Input")
        node.outputs = [PyTensor(name, value, dtype, tuple(shape))]
        self._append(node)
        self.inputs.append(name)
        return name

    def layer(self, optype: str, name: str, bottoms: Sequence[str], params: Dict[str, object] = None,
              constants: Dict[str, torch.Tensor] = None, tops: Sequence[str] = None,
              n_tops: int = 1, top_shapes: Sequence[Sequence[int]] = None) -> List[str]:
        """Add a layer; returns its top tensor names (default: the layer's name).

        `top_shapes` is only for layers whose forward reads its output's IR
        shape (Resize, FractionalPool, MaxUnpool, UpsampleByIndex, CTCGreedyDecoder), and for layers
        whose top shapes follow the data (registry.has_data_dependent_shapes):
        there they are the bounds the IR states, and the example value is
        zero-filled up to them, so that the layers after it compute their bounds
        too (as the tool chain's parser infers shapes from its largest example);
        other layers' shapes are computed."""
        node = PyNode(name, optype)
        node.params = OrderedDict(params or {})
        for cname, value in (constants or {}).items():
            value = value.detach().cpu().contiguous()
            dtype = _dtype_of(value)
            node.constants[cname] = PyTensor(cname, value, dtype, tuple(value.shape))
        try:
            node.inputs = [self.tensors[b] for b in bottoms]
        except KeyError as e:
            raise GraphError(f"layer '{name}': bottom tensor {e} does not exist yet") from None
        if tops is None:
            tops = [name] if n_tops == 1 else [f"{name}_{i}" for i in range(n_tops)]
        node.outputs = [PyTensor(t) for t in tops]
        for t, shape in zip(node.outputs, top_shapes or []):
            t.ir_shape = tuple(shape)
        with torch.no_grad():
            node.forward()
        bounded = top_shapes is not None and has_data_dependent_shapes(optype)
        for t in node.outputs:
            t.dtype = _dtype_of(t.betensor)
            if bounded:
                check_shape(node, t, 1.0, bounded=True)
                t.betensor = _zero_filled(t.betensor, t.ir_shape)
            else:
                t.ir_shape = tuple(t.betensor.shape)
        self._append(node)
        return list(tops)

    def build(self, outputs: Sequence[str]) -> QuantizeGraph:
        graph = QuantizeGraph(self.name)
        graph.set_layers(self.nodes, self.inputs, list(outputs), where=f"builder '{self.name}'")
        return graph

    def _append(self, node: PyNode) -> None:
        for t in node.outputs:
            if t.name in self.tensors:
                raise GraphError(f"layer '{node.name}': tensor '{t.name}' already exists")
            self.tensors[t.name] = t
        self.nodes.append(node)


def _zero_filled(value: torch.Tensor, bound) -> torch.Tensor:
    """value zero-filled at the end of each axis up to `bound` (of the same rank; else as it is)."""
    if value.dim() != len(bound):
        return value
    pads = [p for d, b in zip(reversed(value.shape), reversed(bound)) for p in (0, int(b) - d)]
    return torch.nn.functional.pad(value, pads)


_TORCH_TO_DTYPE = {
    torch.float32: Dtype.FP32, torch.float16: Dtype.FP16, torch.bfloat16: Dtype.BFP16,
    torch.float64: Dtype.FP64, torch.int8: Dtype.INT8, torch.uint8: Dtype.UINT8,
    torch.int16: Dtype.INT16, torch.int32: Dtype.INT32, torch.int64: Dtype.INT64, torch.bool: Dtype.BOOL,
}


def _dtype_of(value: torch.Tensor) -> Dtype:
    return _TORCH_TO_DTYPE[value.dtype]
