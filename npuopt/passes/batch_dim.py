"""modify_batch_dim: the written IR's batch size. While the IR is written, the quantized
graph's shapes are rewritten as the tool chain rewrites them: every non-Constant layer's tops with the
input's batch on their first axis take the new batch, other first axes (a batch folded
into a larger axis) scale with it; Reshape layers take their new top shape, Slice
layers keep their bounds inside the new input shape. The integer arithmetic does not
change, and the graph in memory keeps its shapes (npuopt's forwards check the data's
batch against them)."""
import contextlib
import copy

from ..errors import ConfigError
from ..logger import OPT_INFO
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
