"""Split a `with_activation` the tool chain cannot fuse (SIGMOID, SELU, GELU, ...: anything
but NONE/RELU/RELU6/CLIP/LEAKYRELU/PRELU) out of its layer into an Activation layer of its
own, which then quantizes as a lookup table. The tool chain's reader refuses such fused
activations; the parser writes them from frameworks that fuse freely."""
from ..logger import OPT_DEBUG
from ..node import PyNode
from ..ops.activation import FUSABLE, method_of
from ..tensor import PyTensor

# params that belong to an activation method rather than to the layer carrying it
ACTIVATION_PARAMS = ("alpha", "beta", "gamma", "approximate", "lambd", "bias", "clip_min", "clip_max",
                     "negative_slope_value", "negative_slope_type")


def split_activation(graph) -> list:
    """Returns the Activation layers added, each right after the layer it came from."""
    nodes, added = [], []
    for node in graph.nodes:
        nodes.append(node)
        if "with_activation" not in node.params or len(node.outputs) != 1:
            continue
        method = method_of(node, "with_activation")
        if method in FUSABLE:
            continue
        out = node.outputs[0]
        between = PyTensor(f"{out.name}_before_{method.lower()}", dtype=out.dtype, ir_shape=out.ir_shape)
        act = PyNode(f"{node.name}_{method.lower()}", "Activation")
        act.params["method"] = method
        for key in ACTIVATION_PARAMS:
            if key in node.params:
                act.params[key] = node.params.pop(key)
        node.params["with_activation"] = "NONE"
        act.inputs, act.outputs = [between], [out]
        node.outputs[0] = between
        nodes.append(act)
        added.append(act)
        OPT_DEBUG("split with_activation %s of %s '%s' into Activation '%s'", method, node.type, node.name, act.name)
    if added:
        graph.nodes = nodes
        graph.relink()
    return added
