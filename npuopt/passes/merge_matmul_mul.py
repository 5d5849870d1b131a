"""Fold a multiplication by one positive number next to a MatMul into that MatMul (the
tool chain's enable_pass_merge_matmul_mul, on by default there): a Mul (or Eltwise MUL)
by a Constant whose values are one positive number, or a BatchNorm scaling by one
positive number with zero biases, that reads the MatMul's output or feeds one of its
operands, with only layers that move values (MOVING_TYPES, each read by the next alone)
between, goes; the MatMul's param `fused_multiplier` takes its factor. The float outputs
stay the same; quantized, the factor joins the MatMul's rescale: one requantization
fewer, and in fp8 modes the layers between stay fp8 instead of passing through 8-bit
integers.

Beyond the tool chain, which leaves a Mul whose Constant other layers read too: the
Constant may be shared (PyTorch's attention scales q and k by one shared sqrt, and
the parser writes four Muls reading one Constant in a two-layer encoder)."""
from typing import Optional, Tuple

from ..config import SHAPE_ONLY_TYPES
from ..logger import OPT_DEBUG
from ..registry import OpType


# the layers a factor passes through unchanged: they move values (Pad's fill would be scaled)
MOVING_TYPES = tuple(t for t in SHAPE_ONLY_TYPES if t != "Pad")


def _scaling(node, producers) -> Optional[Tuple[float, object]]:
    """(the positive number `node` multiplies by, the input it multiplies), else None."""
    if str(node.get_param("with_activation", "NONE")).upper() != "NONE":
        return None
    multiply = node.type == OpType.Mul or \
        node.type == OpType.Eltwise and str(node.get_param("method", "")).upper() == "MUL"
    if multiply and len(node.inputs) == 2:
        for scalar, data in ((1, 0), (0, 1)):
            source = producers.get(node.inputs[scalar].name)
            if source is None or source.type != OpType.Constant or "weights" not in source.constants:
                continue
            v = source.get_constant("weights").betensor
            if v.is_floating_point() and v.numel() and bool((v == v.flatten()[0]).all()) and \
                    float(v.flatten()[0]) > 0 and tuple(node.outputs[0].ir_shape) == tuple(node.inputs[data].ir_shape):
                return float(v.flatten()[0]), node.inputs[data]
    if node.type == OpType.BatchNorm and len(node.inputs) == 1:
        w, b = node.constants.get("weights"), node.constants.get("biases")
        if w is not None and w.betensor.numel() and bool((w.betensor == w.betensor.flatten()[0]).all()) and \
                float(w.betensor.flatten()[0]) > 0 and (b is None or not bool(b.betensor.any())):
            return float(w.betensor.flatten()[0]), node.inputs[0]
    return None


def merge_matmul_mul(graph) -> list:
    """Returns the scaling layers removed (and the Constants no layer reads any more)."""
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    outputs = {t.name for t in graph.output_tensors}
    slots = {}

    def read_again():
        slots.clear()
        for n in graph.nodes:
            for x in n.inputs:
                slots.setdefault(x.name, []).append(n)

    def sole_reader(t):
        """The one layer that reads t, once (x @ x reads it twice), or None."""
        found = slots.get(t.name, [])
        return found[0] if len(found) == 1 and t.name not in outputs else None

    read_again()
    removed, constants = [], []
    for matmul in [n for n in graph.nodes if n.type == OpType.MatMul and len(n.outputs) == 1]:
        found = []  # (scaling layer, its factor, the input it scales, whether it reads the MatMul's output)
        node = sole_reader(matmul.outputs[0])  # after the output
        while node is not None and node.type in MOVING_TYPES and len(node.outputs) == 1:
            node = sole_reader(node.outputs[0])
        scaling = _scaling(node, producers) if node is not None else None
        if scaling is not None:
            found.append((node, *scaling, True))
        for t in matmul.inputs:  # before an operand
            node = producers.get(t.name)
            while node is not None and node.type in MOVING_TYPES and len(node.inputs) == 1 and \
                    len(node.outputs) == 1 and sole_reader(node.outputs[0]) is not None:
                node = producers.get(node.inputs[0].name)
            if node is None or any(node is f[0] for f in found) or len(node.outputs) != 1 or \
                    sole_reader(node.outputs[0]) is None:
                continue
            scaling = _scaling(node, producers)
            if scaling is not None:
                found.append((node, *scaling, False))
        for scaling, factor, source, after in found:
            gone = scaling.outputs[0]
            matmul.params["fused_multiplier"] = float(matmul.params.get("fused_multiplier", 1.0)) * factor
            constants += [producers[t.name] for t in scaling.inputs if producers[t.name].type == OpType.Constant]
            if after:  # the layer before writes its tensor: readers and outputs keep it
                producers[source.name].outputs[0] = gone
                producers[gone.name] = producers[source.name]
            else:
                for n in graph.nodes:
                    n.inputs = [source if x.name == gone.name else x for x in n.inputs]
            graph.nodes.remove(scaling)
            removed.append(scaling)
            read_again()
            OPT_DEBUG("merged %s '%s' (x %g) into MatMul '%s'", scaling.type, scaling.name, factor, matmul.name)
    unread = [c for c in dict.fromkeys(constants)
              if c.outputs[0].name not in slots and c.outputs[0].name not in outputs]
    graph.nodes = [n for n in graph.nodes if all(n is not c for c in unread)]
    if removed:
        graph.relink()
    return removed + unread
