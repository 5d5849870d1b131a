"""Shared grids as plan entries: a layer whose input branches share one quantization
copies or combines their integers directly, where otherwise it rescales each branch
(a multiply and shift per element on the NPU). Two cfg fields ask for it:
`unify_scales_for_concat` (Concat layers, the Concat's output range) and its
generalization `unify_scales_for_multi_inputs_operators` (the listed layer types, a
range chosen by `max|min|avg|out`).

For each branch of such a layer, the nearest layers before it that decide their own
output grid (its "key" layers: a Convolution, Eltwise, ... but not a Reshape or a MAX
pooling, which pass their input's grid on) get one range planned
(tensors.plan_activation_range), and the layers in between carry it on.

As in the Compass Optimizer: the search goes back at most `search_depth` layers from
each branch (0: no limit) and takes the key layers at the nearest distance; a branch
that is invariant (integer data) is left out; a layer whose branches differ in dtype,
or that has a branch without key layers, is left alone; layers that share key layers
are unified together, with the method of the last of them. Where npuopt departs from
OPT: OPT gives the key layers one scale centred on zero; npuopt plans one range of that
scale shaped like the union of the key layers' ranges (so an unsigned branch stays
unsigned), and for `out` the union of the layers' output ranges; layers one of which
is a key layer of another (a Concat that copies its branches hands their grid on) are
unified together too. The branches end up with identical grids, so the thresholds
(branch scales within that ratio count as equal) have nothing left to ignore."""
import re
from dataclasses import dataclass
from typing import Dict, List, Set

from ..errors import ConfigError
from ..logger import OPT_INFO, OPT_WARN
from ..registry import OpType
from . import tensors as QT
from .settings import settings_of

METHODS = ("max", "min", "avg", "out", "skip")


@dataclass(frozen=True)
class UnifyRule:
    """How a layer's input branches get one grid. method: the unified scale is the
    largest (`max`, the finest grid) or smallest (`min`) or mean (`avg`) of the key
    layers' scales, or the layer's own output range (`out`); `skip` leaves it alone.
    (The cfg's threshold is not kept: the branches get identical grids.)"""
    search_depth: int   # 0: no limit
    method: str


def parse_rules(text: str) -> Dict[str, UnifyRule]:
    """{layer type, lower case: rule} of a `[(Type, depth, threshold, method), ...]` value."""
    rules = {}
    for entry in re.findall(r"\(([^()]*)\)", text or ""):
        parts = [p.strip() for p in entry.split(",") if p.strip()]
        if len(parts) != 4 or parts[3].lower() not in METHODS:
            raise ConfigError(f"unify_scales_for_multi_inputs_operators: '({entry})' is not "
                              f"(Type, search_depth, threshold, {'|'.join(METHODS)})")
        rules[parts[0].lower()] = UnifyRule(int(parts[1]), parts[3].lower())
    return rules


def multi_input_rules(cfg, graph) -> Dict[str, UnifyRule]:
    """{layer name: its rule} from unify_scales_for_multi_inputs_operators (with its
    per-layer forms); a listed type no layer of the graph has is warned about."""
    parsed: Dict[str, Dict[str, UnifyRule]] = {}
    rules, listed = {}, set()
    for node in graph.nodes:
        text = cfg.of("unify_scales_for_multi_inputs_operators", node)
        if text not in parsed:
            parsed[text] = parse_rules(text)
            listed.update(parsed[text])
        rule = parsed[text].get(node.type.lower())
        if rule is not None and rule.method != "skip":
            rules[node.name] = rule
    missing = sorted(listed - {n.type.lower() for n in graph.nodes})
    if missing:
        OPT_WARN(f"unify_scales_for_multi_inputs_operators: the graph has no layer of type(s) {', '.join(missing)}")
    return rules


def concat_rules(cfg, graph) -> Dict[str, UnifyRule]:
    """unify_scales_for_concat as rules: every Concat, the Concat's output range."""
    rule = UnifyRule(cfg.unify_scales_for_concat_max_depth, "out")
    return {n.name: rule for n in graph.nodes if n.type == OpType.Concat}


def decides_own_grid(qnode) -> bool:
    """Whether the quantized layer's output grid is its own choice, not its input's."""
    if not qnode.quantized or not qnode.outputs or qnode.outputs[0].qinvariant:
        return False
    if not qnode.inputs:
        return True
    a, b = qnode.outputs[0], qnode.inputs[0]
    return any(getattr(a, k) != getattr(b, k) for k in ("scale", "zerop", "dtype", "qmin", "qmax"))


def _activation_settings(node) -> tuple:
    st = settings_of(node)
    return st.activation_bits, st.quantize_method_for_activation


def key_layers(layer, producers: dict, qnodes: dict, max_depth: int):
    """[the key layers of each branch of `layer` that is not invariant], or None where a
    branch has none within max_depth (or the branches' dtypes differ); `producers` maps
    a tensor name to the float layer that writes it, `qnodes` a name to the quantized layer."""
    qlayer = qnodes[layer.name]
    if len({t.dtype for t in qlayer.inputs}) > 1:
        return None
    wanted = _activation_settings(layer)
    branches = []
    for t, qt in zip(layer.inputs, qlayer.inputs):
        if qt.qinvariant:
            continue
        level = [producers[t.name]] if t.name in producers else []
        seen = {n.name for n in level}
        found = []
        for _ in range(max_depth + 1):
            found = [n for n in level if n.name in qnodes and decides_own_grid(qnodes[n.name])
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


def _grid_scale(node, lo: float, hi: float) -> float:
    return QT.activation_grid(node, lo, hi)[0]


def unified_range(graph, layers: List[str], keys: List[str], method: str) -> tuple:
    """The one range planned on `keys` for the group `layers`: for `out` the union of
    the layers' output ranges; otherwise the union of the key layers' ranges, scaled to
    the chosen key scale."""
    def range_of(name):
        node = graph.node(name)
        return QT.activation_range(node, node.outputs[0], _activation_settings(node)[1].symmetric)
    ranges = [range_of(n) for n in (layers if method == "out" else keys)]
    lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    if method == "out":
        return lo, hi
    node = graph.node(keys[0])
    scales = [_grid_scale(node, *r) for r in ranges]
    target = {"max": max(scales), "min": min(scales), "avg": sum(scales) / len(scales)}[method]
    factor = _grid_scale(node, lo, hi) / target
    return lo * factor, hi * factor


def unify_input_scales(graph, qgraph, rules: Dict[str, UnifyRule], field: str) -> List[str]:
    """Plan the ranges that give the input branches of each layer named in `rules` one
    grid, from the decisions of the float `graph`'s plan as `qgraph` realises it; the
    key layers whose output range was planned. `field` names the cfg field in the log."""
    qnodes = {n.name: n for n in qgraph.nodes}
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    candidates = [name for name in rules if len(graph.node(name).inputs) > 1 and name in qnodes
                  and qnodes[name].quantized]
    keys: Dict[str, Set[str]] = {}
    for name in candidates:
        depth = rules[name].search_depth if rules[name].search_depth > 0 else len(graph.nodes)
        branches = key_layers(graph.node(name), producers, qnodes, depth)
        if branches:
            keys[name] = {n.name for branch in branches for n in branch}
    groups: List[List[str]] = []  # layers that share key layers, or are one's key layer: unified together
    for name in keys:
        joined = [g for g in groups if any(keys[name] & keys[other] or other in keys[name] or name in keys[other]
                                           for other in g)]
        groups = [g for g in groups if g not in joined] + [sum(joined, []) + [name]]
    planned = []
    for group in groups:
        group_keys = sorted(set().union(*(keys[name] for name in group)))
        method = rules[max(group, key=order.get)].method
        lo, hi = unified_range(graph, group, group_keys, method)
        for key in group_keys:
            QT.plan_activation_range(graph.node(key).outputs[0], lo, hi)
        planned += group_keys
    others = "" if len(keys) == len(candidates) else (
        " (the others have branches of different dtypes, or one without a layer deciding its grid within the "
        "search depth)")
    OPT_INFO(f"{field}: the input branches of {len(keys)} of {len(candidates)} layers planned to one grid{others}")
    return planned


def kv_cache_inputs(graph, node) -> list:
    """The cache inputs of a key/value-cache Concat, as the tool chain recognises one: its
    inputs come from layers of exactly two types, one of them Input or Constant (a
    Constant holding zeros only); [] for any other layer."""
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    parents = [producers.get(t.name) for t in node.inputs]
    if node.type != OpType.Concat or any(p is None for p in parents):
        return []
    types = {p.type for p in parents}
    if len(types) != 2 or not types & {"Input", "Constant"}:
        return []
    if any(p.type == "Constant" and any(c.betensor.abs().max() != 0 for c in p.constants.values()) for p in parents):
        return []
    return [t for t, p in zip(node.inputs, parents) if p.type in ("Input", "Constant")]


def unify_kv_cache_concats(cfg, graph) -> List[str]:
    """unify_scales_for_kvc_concat: the cache inputs (Input/Constant) of each key/value
    cache Concat take the range of its other input, so that the cache fed back on the next
    step keeps one grid. Returns the layers whose output range was planned."""
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    planned = []
    for node in graph.nodes:
        caches = kv_cache_inputs(graph, node) if cfg.of("unify_scales_for_kvc_concat", node) else []
        real = [t for t in node.inputs if t not in caches]
        if not caches or not real:
            continue
        source = producers[real[0].name]
        lo, hi = QT.activation_range(source, real[0], _activation_settings(source)[1].symmetric)
        for t in caches:
            QT.plan_activation_range(t, lo, hi)
            planned.append(producers[t.name].name)
    if planned:
        OPT_INFO(f"unify_scales_for_kvc_concat: {len(planned)} cache input(s) take the range of their Concat's "
                 f"other input")
    return planned


def unify_scales(cfg, graph, plan) -> None:
    """The cfg's unify_scales_for_kvc_concat, unify_scales_for_concat, then
    unify_scales_for_multi_inputs_operators, each reading the decisions of `plan`
    (quant/plan.py) as the earlier one left them."""
    plan.replan(*unify_kv_cache_concats(cfg, graph))
    for field, rules in (("unify_scales_for_concat", cfg.unify_scales_for_concat and concat_rules(cfg, graph)),
                         ("unify_scales_for_multi_inputs_operators", multi_input_rules(cfg, graph))):
        if rules:
            plan.replan(*unify_input_scales(graph, plan.realised(), rules, field))
