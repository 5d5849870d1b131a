"""PyNode: one layer of the graph."""
from collections import OrderedDict
from typing import Dict, List

from .errors import GraphError, IRError
from .registry import OP_FORWARDS, OP_QUANTIZERS
from .tensor import PyTensor

_MISSING = object()


class PyNode:
    """A layer: its type, params (IR keys, in order), constants, and tensors.

    `inputs`/`outputs` are PyTensors shared with neighbouring layers;
    `attrs` holds internal state that is never serialized; `quantized` says
    whether `forward()` computes in integers.
    """

    def __init__(self, name: str, optype: str, layer_id=None):
        self.name = name
        self.type = optype
        self.layer_id = layer_id
        self.params: Dict[str, object] = OrderedDict()
        self.constants: Dict[str, PyTensor] = OrderedDict()
        self.inputs: List[PyTensor] = []
        self.outputs: List[PyTensor] = []
        self.attrs: Dict[str, object] = {}
        self.placeholders: List[PyTensor] = []
        self.quantized = False

    def get_param(self, key: str, default=_MISSING):
        """A param's value; a missing required one is an IRError naming the layer."""
        if key in self.params:
            return self.params[key]
        if default is _MISSING:
            raise IRError(f"layer '{self.name}' ({self.type}): missing parameter '{key}'")
        return default

    def get_constant(self, key: str) -> PyTensor:
        if key not in self.constants:
            raise IRError(f"layer '{self.name}' ({self.type}): missing constant '{key}'")
        return self.constants[key]

    def forward(self, *args):
        fn = OP_FORWARDS.get(self.type)
        if fn is None:
            raise GraphError(f"layer '{self.name}': no forward function registered for layer type '{self.type}'")
        return fn(self, *args)

    def quantize(self, *args):
        fn = OP_QUANTIZERS.get(self.type)
        if fn is None:
            raise GraphError(f"layer '{self.name}': no quantize function registered for layer type '{self.type}'")
        return fn(self, *args)

    def __repr__(self) -> str:
        return f"PyNode({self.name!r}, {self.type})"
