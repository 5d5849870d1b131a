"""modify_batch_dim: the written IR's batch size. While the IR is written, the quantized
graph's shapes are rewritten as the tool chain rewrites them: every non-Constant layer's tops with the
input's batch on their first axis take the new batch, other first axes (a batch folded
into a larger axis) scale with it; Reshape layers take their new top shape, Slice
layers keep their bounds inside the new input shape. The integer arithmetic does not
change, and the graph in memory keeps its shapes (npuopt's forwards check the data's
batch against them)."""
import contextlib
import copy

from ..dtype import Dtype
from ..errors import ConfigError
from ..graph import PyGraph
from ..logger import OPT_INFO
from ..node import PyNode
from ..quant.fields import BranchRescales
from ..tensor import TensorShape


@contextlib.contextmanager
def written_batch(graph, batch: int, batch_dim: int = 0):
    """The graph with the written IR's batch `batch` inside, as it was after."""
    kept = [(t, t.ir_shape) for t in graph.tensors] + [(t, t.ir_shape) for t in graph.input_tensors]
    params = [(node, copy.deepcopy(node.params)) for node in graph.nodes if node.type in ("Reshape", "Slice")]
    try:
        modify_batch_dim(graph, batch, batch_dim)
        yield graph
    finally:
        for t, shape in kept:
            t.ir_shape = shape
        for node, p in params:
            node.params = p


def modify_batch_dim(graph, batch: int, batch_dim: int = 0) -> None:
    if not graph.input_tensors:
        return
    origin = int(graph.input_tensors[0].ir_shape[batch_dim])
    if origin < 1:
        raise ConfigError(f"modify_batch_dim: the first input's batch axis {batch_dim} has size {origin}")
    for node in graph.nodes:
        if node.type == "Constant":
            continue
        for t in node.outputs:
            if not len(t.ir_shape):
                continue
            first = int(t.ir_shape[0])
            t.ir_shape = TensorShape((batch if first == origin else first // origin * batch,) + tuple(t.ir_shape[1:]))
        if node.type == "Reshape" and "shape" in node.params:
            node.params["shape"] = [int(d) for d in node.outputs[0].ir_shape]
        if node.type == "Slice" and node.inputs and "begin" in node.params and "end" in node.params:
            full = [int(d) for d in node.inputs[0].ir_shape]
            node.params["begin"] = [min(d, int(b)) for d, b in zip(full, node.params["begin"])]
            node.params["end"] = [min(d, int(e)) for d, e in zip(full, node.params["end"])]
    OPT_INFO(f"modify_batch_dim: the written IR's batch is {batch} (the float IR's: {origin})")


def parallel_batches(graph, copies: int, batch_dim: int = 0):
    """export_parallel_batch: the IR the tool chain writes for `copies` batches side by side:
    each graph input, `copies` times as large along the batch axis, is split into them by a
    Split layer (named after the input layer); `copies` copies of the layers run on them
    (the first under the layers' own names, the others with `_clone_<i>`); a Concat per
    graph output joins them (`<output>_concat`), copying integers on one grid. A new graph:
    `graph` is left as it is."""
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    nodes, parts = [], {t.name: [] for t in graph.input_tensors}
    for t in graph.input_tensors:
        layer = producers[t.name]
        whole = _renamed(t, f"{t.name}_input", copies, batch_dim)
        source = PyNode(f"{layer.name}_Input", "Input")
        source.outputs, source.quantized = [whole], layer.quantized
        split = PyNode(f"{layer.name}_Split", "Split")
        split.params.update(axis=batch_dim, splits=[int(t.ir_shape[batch_dim])] * copies)
        split.params["unquantifiable"] = layer.params.get("unquantifiable", False)
        split.inputs, split.quantized = [whole], layer.quantized
        split.outputs = parts[t.name] = [_renamed(t, t.name + _suffix(i)) for i in range(copies)]
        nodes += [source, split]
    outputs = [[] for _ in graph.output_tensors]
    for i in range(copies):
        memo = {id(t): parts[t.name][i] for t in graph.input_tensors}
        for node in graph.nodes:
            if node.type == "Input" and all(t.name in parts for t in node.outputs):
                continue
            twin = copy.deepcopy(node, memo)
            twin.name = node.name + _suffix(i)
            for t in twin.outputs:
                t.name = t.name + _suffix(i)
            nodes.append(twin)
        for k, t in enumerate(graph.output_tensors):
            outputs[k].append(memo[id(t)] if id(t) in memo else parts[t.name][i])
    for k, t in enumerate(graph.output_tensors):
        joined = _renamed(t, f"{t.name}_concat", copies, batch_dim)
        concat = PyNode(f"{t.name}_concat", "Concat")
        concat.params["axis"] = batch_dim
        concat.inputs, concat.outputs, concat.quantized = outputs[k], [joined], t.is_quantized
        concat.params["unquantifiable"] = not t.is_quantized
        if t.is_quantized:
            BranchRescales([1] * copies, [0] * copies, Dtype.UINT8, [Dtype.INT8] * copies).write(concat)
        nodes.append(concat)
    out = PyGraph(graph.name)
    out.header = copy.copy(graph.header)
    out.set_layers(nodes, [f"{t.name}_input" for t in graph.input_tensors],
                   [f"{t.name}_concat" for t in graph.output_tensors], where="export_parallel_batch")
    OPT_INFO(f"export_parallel_batch: the written IR runs {copies} batches side by side")
    return out


def _suffix(i: int) -> str:
    return "" if i == 0 else f"_clone_{i - 1}"


def _renamed(t, name: str, copies: int = 1, batch_dim: int = 0):
    """A copy of tensor t named `name`, its batch axis `copies` times as large."""
    twin = copy.copy(t)
    twin.name = name
    shape = list(twin.ir_shape)
    if shape:
        shape[batch_dim] = int(shape[batch_dim]) * copies
    twin.ir_shape = TensorShape(shape)
    return twin
