"""Outlier channels split off a FullyConnected layer's input (npuopt's own, beyond OPT).

In decoders a few channels of the down projection's input (the SiLU-gated product
silu(gate(x)) * up(x)) carry "massive activations": SmolLM2-135M's layer 11 reaches
3,569 in two of 1,536 channels, at the window's first token, where the others stay
under 16. One per-tensor 8-bit grid sized for them rounds every other value to zero,
and SmoothQuant cannot move such a range into the weights without ruining the
weights' own grid. Here those channels get layers of their own: the elementwise
subgraph that computes the input (its FullyConnected producers' rows, the activations
and products between) is copied for the outlier channels, the layer reading it keeps
its other columns, a copy reads the outliers' columns, and an Eltwise ADD sums the two
into the original output. Every tensor keeps one per-tensor grid (no per-channel
activation arithmetic on the NPU); each grid now spans its own channels' range. The float function is
unchanged up to the order of a sum.

A layer is split where its input comes from such a subgraph only it reads (FullyConnected
producers with their rows on the last axis, then Activation, Eltwise MUL/ADD/SUB, Mul,
Add, Sub over the same channels), and where the split lowers the per-tensor rounding
noise (range squared times channels, summed over the two grids) at least `min_gain`
times: k, the number of outlier channels (the largest maxima, at most `max_channels`),
is the one of least noise. Channel maxima come from one float pass over the calibration
data. Run it before smooth_quant_zy, whose gated-MLP smoothing then balances each half.

The outliers' own grid still spans the first token's thousands, and their other tokens'
values (a few units) round to zero on 8 bits: their layers take `outlier_bits` of
activations (16 by default; 0: the cfg's), a few channels of a few layers. On SmolLM2-135M
(W8A8, per_tensor_asymmetric activations, smooth_quant_zy[0.5], 128 tokens): perplexity
68.4 unsplit, 40.6 split with 8-bit outliers, 31.4 with 16-bit ones (float 28.4).

Params: split_outlier_channels[min_gain, max_channels, outlier_bits]; the copies take the
settings the cfg gives them by type and name, with outlier_bits."""
import copy
from typing import Dict, List, Optional

import torch

from ...logger import OPT_INFO
from ...node import PyNode
from ...registry import OpType
from ...tensor import PyTensor
from . import global_calibration
from ._params import read_params
from ._smoothing import ChannelStatistics

PARAMS = [  # name, default, minimum, integer
    ("min_gain", 16.0, 1.0, False),  # the least drop of rounding noise (range^2 x channels) that a split must give
    ("max_channels", 32, 1, True),   # the most channels split off one layer's input
    ("outlier_bits", 16, 0, True),   # the activation bits of the outliers' layers (0: the cfg's)
]
ELEMENTWISE = {OpType.Activation: None, OpType.Eltwise: ("MUL", "ADD", "SUB"), OpType.Mul: None,
               OpType.Add: None, OpType.Sub: None}


def outlier_count(maxima: torch.Tensor, min_gain: float, max_channels: int) -> int:
    """How many of the largest channel maxima to give a grid of their own (0: none):
    the k of least noise m_1^2 k + m_(k+1)^2 (C - k), if it is at most 1/min_gain of
    the unsplit m_1^2 C."""
    m = maxima.double().sort(descending=True).values
    channels = m.numel()
    if channels < 2:
        return 0
    ks = torch.arange(1, min(max_channels, channels - 1) + 1)
    noise = m[0] ** 2 * ks + m[ks] ** 2 * (channels - ks)
    best = int(noise.argmin())
    return int(ks[best]) if noise[best] * min_gain <= m[0] ** 2 * channels else 0


def _subgraph(graph, fc, readers, producers, outputs) -> Optional[List[PyNode]]:
    """The nodes computing fc's input channel by channel, producers first (None if
    there is no such subgraph only fc reads)."""
    channels = fc.inputs[0].ir_shape[-1]
    found, todo = {}, [fc.inputs[0]]
    while todo:
        t = todo.pop()
        node = producers.get(t.name)
        if node is None or t.name in outputs or len(node.outputs) != 1 or not t.ir_shape \
                or t.ir_shape[-1] != channels:
            return None
        if node.name in found:
            continue
        if node.type == OpType.FullyConnected:
            if node.get_constant("weights").betensor.shape[0] != channels:
                return None
        elif node.type in ELEMENTWISE and (ELEMENTWISE[node.type] is None or
                                           str(node.params.get("method", "")).upper() in ELEMENTWISE[node.type]):
            if node.constants or any(not x.ir_shape or x.ir_shape[-1] != channels for x in node.inputs):
                return None
            todo.extend(node.inputs)
        else:
            return None
        found[node.name] = node
    inside = set(found) | {fc.name}
    if any(r.name not in inside for n in found.values() for r in readers.get(n.outputs[0].name, [])):
        return None
    return [n for n in graph.nodes if n.name in found]


def _tensor(t: PyTensor, name: str, channels: int) -> PyTensor:
    return PyTensor(name, dtype=t.dtype, ir_shape=tuple(t.ir_shape[:-1]) + (channels,))


def _rows(node: PyNode, index: torch.Tensor) -> None:
    """Keep the FullyConnected layer's output channels `index` (weight rows, biases)."""
    for key in ("weights", "biases"):
        if key in node.constants:
            c = node.constants[key]
            c.betensor = c.betensor[index.to(c.betensor.device)].clone()
            c.ir_shape = tuple(c.betensor.shape)
    node.params["num_output"] = len(index)


def _columns(node: PyNode, index: torch.Tensor) -> None:
    c = node.constants["weights"]
    c.betensor = c.betensor[:, index.to(c.betensor.device)].clone()
    c.ir_shape = tuple(c.betensor.shape)


def _copy(node: PyNode, name: str, plan, changed: dict) -> PyNode:
    twin = PyNode(name, node.type)
    twin.params = copy.deepcopy(node.params)
    twin.constants = {k: PyTensor(c.name, c.betensor.clone(), c.dtype, tuple(c.ir_shape))
                      for k, c in node.constants.items()}
    twin.attrs["qsettings"] = plan.settings_for(twin, **changed)
    return twin


def split(graph, fc: PyNode, chain: List[PyNode], outliers: torch.Tensor, taken: set, plan,
          changed: dict) -> List[PyNode]:
    """Split fc's input channels `outliers` off into copies of `chain` and of fc, summed
    with fc's other columns by an Eltwise ADD that writes fc's output; the new nodes, in
    the order they run (copies of the chain, fc's copy, the sum), to follow fc. Each takes
    the settings the cfg gives it by its type and name, as in a run of the split graph."""
    channels = fc.inputs[0].ir_shape[-1]
    keep = torch.ones(channels, dtype=torch.bool)
    keep[outliers] = False
    inliers = keep.nonzero().flatten()

    def fresh(name):
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    copies, renamed = [], {}
    for node in chain:
        twin = _copy(node, fresh(f"{node.name}_outliers"), plan, changed)
        twin.inputs = [renamed.get(x.name, x) for x in node.inputs]
        twin.outputs = [_tensor(node.outputs[0], fresh(f"{node.outputs[0].name}_outliers"), len(outliers))]
        renamed[node.outputs[0].name] = twin.outputs[0]
        node.outputs[0].ir_shape = tuple(node.outputs[0].ir_shape[:-1]) + (len(inliers),)
        if node.type == OpType.FullyConnected:
            _rows(twin, outliers)
            _rows(node, inliers)
        copies.append(twin)
    out = fc.outputs[0]
    twin = _copy(fc, fresh(f"{fc.name}_outliers"), plan, changed)
    twin.constants.pop("biases", None)
    _columns(twin, outliers)
    _columns(fc, inliers)
    twin.inputs = [renamed[fc.inputs[0].name]]
    twin.outputs = [_tensor(out, fresh(f"{out.name}_outliers"), out.ir_shape[-1])]
    fc.outputs = [_tensor(out, fresh(f"{out.name}_inliers"), out.ir_shape[-1])]
    total = PyNode(fresh(f"{fc.name}_outliers_add"), OpType.Eltwise)
    total.params.update(method="ADD", with_activation="NONE")
    total.inputs, total.outputs = [fc.outputs[0], twin.outputs[0]], [out]
    total.attrs["qsettings"] = plan.settings_for(total)
    return copies + [twin, total]


@global_calibration("split_outlier_channels", "before_calibration")
def split_outlier_channels(ctx, params) -> None:
    """Give the few outlier channels of a FullyConnected layer's input grids of their own (layers copied for them)."""
    p = read_params("split_outlier_channels", params, PARAMS)
    graph = ctx.graph
    readers: Dict[str, List[PyNode]] = {}
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    outputs = {t.name for t in graph.output_tensors}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    chains = {}
    for fc in graph.nodes:
        if fc.type == OpType.FullyConnected and ctx.in_scope(fc) and len(fc.inputs) == 1 \
                and str(fc.params.get("with_activation", "NONE")).upper() == "NONE" \
                and fc.get_constant("weights").betensor.dim() == 2:
            chain = _subgraph(graph, fc, readers, producers, outputs)
            if chain:
                chains[fc.name] = chain
    if not chains:
        OPT_INFO("split_outlier_channels: no FullyConnected layer's input comes from a subgraph it alone reads")
        return
    stats = ChannelStatistics(ctx, {name: [graph.node(name)] for name in chains}, "split_outlier_channels: ranges",
                              rows=0)
    taken = {n.name for n in graph.nodes} | {t.name for t in graph.tensors}
    changed = {"activation_bits": p["outlier_bits"]} if p["outlier_bits"] else {}
    added, done = {}, []
    for name, chain in chains.items():
        maxima = stats.maxima[name]
        k = outlier_count(maxima, p["min_gain"], p["max_channels"])
        if k:
            outliers = maxima.sort(descending=True).indices[:k].sort().values
            added[name] = split(graph, graph.node(name), chain, outliers, taken, ctx.plan, changed)
            done.append(f"{name} ({k}: {float(maxima.max()):.4g} against {float(maxima[maxima.argsort()[-k - 1]]):.4g})")
    if added:
        nodes = []
        for node in graph.nodes:
            nodes.append(node)
            nodes.extend(added.get(node.name, []))
        graph.nodes = nodes
        graph.relink()
    OPT_INFO(f"split_outlier_channels: {len(done)} of {len(chains)} layers' inputs split"
             + (f": {', '.join(done[:4])}{', ...' if len(done) > 4 else ''}" if done else ""))
