"""The mixed-precision quantized graph: which layers stay in float, the
Quantize/DeQuantize layers at their boundaries, and each layer's quantize."""
import copy
from typing import Dict, Set

from ..dtype import Dtype
from ..logger import OPT_WARN
from ..node import PyNode
from ..registry import OP_QUANTIZERS, OpType
from ..tensor import PyTensor
from .settings import QuantSettings
from .tensors import Unsupported

BOUNDARY_TYPES = (OpType.Quantize, OpType.DeQuantize)


def float_layers(graph, settings: Dict[str, QuantSettings]) -> Set[str]:
    """Layers kept in float: asked for (trigger_float_op), or of a type with no quantize function."""
    out = set()
    for node in graph.nodes:
        if settings[node.name].trigger_float_op:
            out.add(node.name)
        elif OP_QUANTIZERS.get(node.type) is None:
            OPT_WARN(f"layer '{node.name}': layer type '{node.type}' has no quantize function; "
                     f"it stays in float (mixed precision)")
            out.add(node.name)
    return out


def build_quantized_graph(float_graph, settings: Dict[str, QuantSettings], keep_float: Set[str]):
    """A quantized copy of `float_graph`; layers in `keep_float` (and layers that
    turn out Unsupported) stay in float behind DeQuantize/Quantize layers."""
    keep_float = set(keep_float)
    while True:
        graph = copy.deepcopy(float_graph)
        _insert_boundaries(graph, keep_float, settings)
        try:
            for node in graph.nodes:
                if node.name in keep_float or node.type == OpType.DeQuantize:
                    continue
                node.attrs["qsettings"] = settings.get(node.name) or settings[node.attrs["boundary_of"]]
                node.quantize()
                node.quantized = True
            mark_unquantifiable(graph)
            return graph, keep_float
        except Unsupported as e:
            OPT_WARN(f"{e}; kept in float (mixed precision)")
            keep_float.add(node.name)


def mark_unquantifiable(graph) -> None:
    """`unquantifiable` on every layer, as the tool chain writes it: true for layers kept
    in float and for the Quantize/DeQuantize layers at their boundaries."""
    for node in graph.nodes:
        node.params["unquantifiable"] = (not node.quantized) or node.type in BOUNDARY_TYPES


def _insert_boundaries(graph, keep_float: Set[str], settings) -> None:
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    made: Dict[tuple, PyTensor] = {}
    new_nodes = []
    for node in list(graph.nodes):
        is_float = node.name in keep_float
        for i, t in enumerate(node.inputs):
            src = producer[t.name]
            if t.qinvariant or (src.name in keep_float) == is_float:
                continue
            kind = OpType.DeQuantize if is_float else OpType.Quantize
            key = (kind, t.name)
            if key not in made:
                suffix = "dequantize" if is_float else "quantize"
                b = PyNode(_unique(graph, f"{t.name}_{suffix}"), kind)
                nt = PyTensor(b.name, t.betensor, Dtype.FP32 if is_float else t.dtype, t.ir_shape)
                nt.statistics = t.statistics
                b.inputs, b.outputs = [t], [nt]
                b.attrs["boundary_of"] = node.name
                settings[b.name] = settings[node.name]
                made[key] = nt
                new_nodes.append(b)
            node.inputs[i] = made[key]
    if new_nodes:
        graph.nodes.extend(new_nodes)
        graph.relink()


def _unique(graph, name: str) -> str:
    names = {n.name for n in graph.nodes} | {t.name for t in graph.tensors}
    out, i = name, 1
    while out in names:
        out, i = f"{name}_{i}", i + 1
    return out
