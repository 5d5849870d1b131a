"""unify_scales_for_concat: a Concat whose input branches share one quantization
copies its integers, where otherwise it rescales each branch (a multiply and shift per
element on the NPU). The plan gives every branch the Concat's output range: for each
branch, the nearest layers before it that decide their own output grid (its "key"
layers: a Convolution, Eltwise, ... but not a Reshape or a pooling, which pass their
input's grid on) get the Concat's output range planned (tensors.plan_activation_range),
and the layers in between carry it to the Concat.

As in the Compass Optimizer: the search goes back at most max_depth layers from each
branch and takes the key layers at the nearest distance; a branch that is invariant
(integer data) is left out; a Concat whose branches differ in dtype, or that has a
branch without key layers, is left alone; Concat layers that share key layers are
unified together, and so are those one of which is a key layer of the other (a
Concat that copies its branches hands their grid on). Where npuopt departs from OPT: OPT gives the key layers the last
such Concat's scale, centred on zero, and then ignores branch scales within
unify_scales_for_concat_threshold of each other; npuopt plans the union of those
Concat layers' output ranges, keeps its zero point, and the branches end up with
identical grids, so the threshold has nothing left to ignore."""
from typing import Dict, List, Set

from ..logger import OPT_INFO
from ..registry import OpType
from . import tensors as QT
from .settings import QuantMethod, settings_of


def _decides_own_grid(qnode) -> bool:
    """Whether the quantized layer's output grid is its own choice, not its input's."""
    if not qnode.quantized or not qnode.outputs or qnode.outputs[0].qinvariant:
        return False
    if not qnode.inputs:
        return True
    a, b = qnode.outputs[0], qnode.inputs[0]
    return any(getattr(a, k) != getattr(b, k) for k in ("scale", "zerop", "dtype", "qmin", "qmax"))


def _activation_settings(node) -> tuple:
    st = settings_of(node)
    return st.activation_bits, QuantMethod.parse(st.quantize_method_for_activation)


def key_layers(concat, producers: dict, qnodes: dict, max_depth: int):
    """[the key layers of each branch that is not invariant], or None where a branch
    has none within max_depth (or the branches' dtypes differ); `producers` maps a
    tensor name to the float layer that writes it, `qnodes` a name to the quantized layer."""
    qconcat = qnodes[concat.name]
    if len({t.dtype for t in qconcat.inputs}) > 1:
        return None
    wanted = _activation_settings(concat)
    branches = []
    for t, qt in zip(concat.inputs, qconcat.inputs):
        if qt.qinvariant:
            continue
        level = [producers[t.name]] if t.name in producers else []
        seen = {n.name for n in level}
        found = []
        for _ in range(max_depth + 1):
            found = [n for n in level if n.name in qnodes and _decides_own_grid(qnodes[n.name])
                     and _activation_settings(n) == wanted]
            if found or not level:
                break
            parents = [producers[i.name] for n in level for i in n.inputs if i.name in producers]
            level = [p for p in dict.fromkeys(parents) if p.name not in seen]
            seen.update(p.name for p in level)
        if not found:
            return None
        branches.append(found)
    return branches


def unify_concat_scales(graph, qgraph, max_depth: int) -> int:
    """Plan the ranges that give the branches of each Concat of the float `graph` one
    grid, from the decisions of its quantized copy `qgraph`; how many Concat layers."""
    qnodes = {n.name: n for n in qgraph.nodes}
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    keys: Dict[str, Set[str]] = {}
    for concat in graph.nodes:
        if concat.type != OpType.Concat or len(concat.inputs) < 2 or concat.name not in qnodes \
                or not qnodes[concat.name].quantized:
            continue
        branches = key_layers(concat, producers, qnodes, max_depth)
        if branches:
            keys[concat.name] = {n.name for branch in branches for n in branch}
    groups: List[List[str]] = []  # Concat layers that share key layers, or are one's key layer: unified together
    for name in keys:
        joined = [g for g in groups if any(keys[name] & keys[other] or other in keys[name] or name in keys[other]
                                           for other in g)]
        groups = [g for g in groups if g not in joined] + [sum(joined, []) + [name]]
    for group in groups:
        ranges = []
        for name in group:
            concat = graph.node(name)
            ranges.append(QT.activation_range(concat, concat.outputs[0], _activation_settings(concat)[1].symmetric))
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        for key in sorted(set().union(*(keys[name] for name in group))):
            QT.plan_activation_range(graph.node(key).outputs[0], lo, hi)
    total = sum(n.type == OpType.Concat for n in graph.nodes)
    others = "" if len(keys) == total else (" (the others have branches of different dtypes, or one without a layer "
                                            "deciding its grid within unify_scales_for_concat_max_depth)")
    OPT_INFO(f"unify_scales_for_concat: the branches of {len(keys)} of {total} Concat layers planned to one "
             f"grid{others}")
    return len(keys)
