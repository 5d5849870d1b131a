"""EasyQuant (Wu et al., "EasyQuant: Post-training Quantization via Scale
Optimization", 2020): the grids of each layer's weights and inputs are searched, in
turn, for the quantized layer whose output is nearest the float layer's in cosine
similarity, layer by layer on the calibration data. It plans ranges only (weights:
tensors.plan_weight_range; activations: tensors.plan_activation_range), so a
rounding method may follow it (`easy_quant & adaround`).

Each candidate scales the current range by 1/k for k from alpha to beta (the grid's
scale times k, OPT's search). A layer is scored with every input the float one on
its grid, so its choice does not depend on the layers before it.

OPT's params: easy_quant[batches, epochs, alpha, beta, nsteps, ngroups]. Where
npuopt departs from OPT: a chunk of per-channel weights (ngroups) scales its
channels' own ranges together, where OPT gives them one common range, which undoes
per-channel quantization within the chunk; an activation's range is searched once,
at the first layer that reads it (OPT searches at every reader and keeps the last
reader's choice); a searched range is kept only where it beats the current one, for
weights and activations alike."""
import math
from typing import List, Optional

import torch

from ...errors import ConfigError
from .. import qmath
from .. import tensors as QT
from ..compare import dequantized
from ..settings import settings_of
from ..weight_plans import planned
from . import global_calibration, one_thread
from ._layers import LayerData, has_tuned_weights
from ._stream import Stream
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("batches", 1, 0, True),     # calibration batches used (0: all of them)
    ("epochs", 1, 1, True),      # passes over the layers, each from the plan of the last
    ("alpha", 0.5, 1e-3, False),  # scales tried: alpha to beta times the current one
    ("beta", 2.0, 1e-3, False),
    ("nsteps", 10, 1, True),     # ... in this many steps
    ("ngroups", 4, 0, True),     # per-channel weights: searched in this many chunks of channels (0: each alone)
]


class LayerScore:
    """Cosine similarity of a quantized layer's outputs (dequantized) to the float
    layer's over the batches, its inputs the float ones on their current grids: the
    layer as the plan realises it now."""

    def __init__(self, plan, name: str, inputs: List[List[torch.Tensor]], outputs: List[List[torch.Tensor]]):
        self.plan, self.name, self.inputs, self.outputs = plan, name, inputs, outputs

    def __call__(self) -> float:
        qnode = self.plan.realised().node(self.name)
        dot = ff = qq = 0.0
        with torch.no_grad(), one_thread():  # sums in the same order at any thread count (issue 13)
            for b in range(len(self.outputs[0])):
                for t, values in zip(qnode.inputs, self.inputs):
                    t.betensor = _on_grid(t, values[b])
                qnode.forward()
                for t, values in zip(qnode.outputs, self.outputs):
                    q = dequantized(t).to(torch.float64).reshape(-1)
                    f = values[b].to(torch.float64).reshape(-1)
                    dot, ff, qq = dot + float(q @ f), ff + float(f @ f), qq + float(q @ q)
        return dot / math.sqrt(ff * qq) if ff > 0 and qq > 0 else float(ff == qq)


def _on_grid(t, v: torch.Tensor) -> torch.Tensor:
    """Float value v as quantized tensor t holds it."""
    if t.qinvariant or not t.is_quantized:
        return v.to(t.dtype.torch_dtype)
    return qmath.quantize(v, t.broadcast_scale, t.broadcast_zerop, t.qmin, t.qmax).to(t.dtype.torch_dtype)


def _chunks(node, lo, ngroups: int) -> List[Optional[torch.Tensor]]:
    """The channel masks searched together: None for per-tensor weights; else the
    channels (or, for per-tensor settings on a grouped layer, the groups, which share
    a grid) cut into ngroups chunks (0: each alone)."""
    if not isinstance(lo, torch.Tensor):
        return [None]
    channels = lo.numel()
    if settings_of(node).quantize_method_for_weight.per_channel:
        unit = torch.arange(channels)
    else:
        unit = torch.arange(channels) // (channels // node.get_param("group", 1))
    units = int(unit.max()) + 1
    parts = units if ngroups == 0 else min(ngroups, units)
    return [(unit >= units * i // parts) & (unit < units * (i + 1) // parts) for i in range(parts)]


def search_weights(node, plan, score: LayerScore, factors: List[float], ngroups: int) -> None:
    """Plan the weights' range (per chunk of channels) whose layer scores best."""
    before = planned(node, "planned_ranges", "weights")
    lo, hi = QT.weight_range(node, "weights", 0, node.get_param("group", 1))

    def try_range(factor) -> float:
        QT.plan_weight_range(node, "weights", lo / factor, hi / factor)
        plan.replan(node.name)
        return score()

    initial = score()
    best = torch.ones_like(lo) if isinstance(lo, torch.Tensor) else 1.0
    for mask in _chunks(node, lo, ngroups):
        chunk_best, chunk_score = 1.0, initial
        for k in factors:
            s = try_range(k if mask is None else torch.where(mask, torch.tensor(k), torch.tensor(1.0)))
            if s > chunk_score:
                chunk_best, chunk_score = k, s
        best = chunk_best if mask is None else torch.where(mask, torch.tensor(chunk_best), best)
    if try_range(best) <= initial:
        QT.plan_weight_range(node, "weights", *(before or (None, None)))
        plan.replan(node.name)


def search_input(i: int, node, plan, producers: dict, score: LayerScore, factors: List[float]) -> None:
    """Plan the range of the layer's input i whose layer scores best, the producing
    layer quantized again with each (it decides the tensor's grid)."""
    qgraph = plan.realised()
    t, ft = qgraph.node(node.name).inputs[i], node.inputs[i]
    fproducer = producers.get(ft.name)
    qproducer = qgraph.node(fproducer.name) if fproducer is not None else None
    if t.name != ft.name or qproducer is None or not qproducer.quantized or not t.is_quantized or t.qinvariant:
        return
    before = ft.planned_range
    lo, hi = qmath.dequantize(torch.tensor([t.qmin, t.qmax], dtype=torch.float32), t.scale, t.zerop).tolist()

    def try_range(rng) -> float:
        QT.plan_activation_range(ft, *(rng or (None, None)))
        plan.replan(fproducer.name, node.name)
        return score()

    best, best_score = before, score()
    for k in factors:
        s = try_range((lo / k, hi / k))
        if s > best_score:
            best, best_score = (lo / k, hi / k), s
    try_range(best)


@global_calibration("easy_quant", "after_calibration", edits_float=False)
def easy_quant(ctx, params):
    """EasyQuant: each layer's weight and input ranges searched for the best cosine similarity."""
    p = read_params("easy_quant", params, PARAMS)
    if p["beta"] < p["alpha"]:
        raise ConfigError(f"field 'global_calibration': easy_quant's beta ({p['beta']:g}) must be at least "
                          f"its alpha ({p['alpha']:g})")
    factors = torch.linspace(p["alpha"], p["beta"], p["nsteps"]).tolist()
    data = LayerData(ctx, p["batches"])
    producers = {t.name: n for n in ctx.graph.nodes for t in n.outputs}
    for epoch in range(p["epochs"]):
        searched = set()
        stream = Stream(ctx.graph, data.data, one_thread=True)
        try:
            desc = "easy_quant" if p["epochs"] == 1 else f"easy_quant {epoch + 1}/{p['epochs']}"
            for node in ctx.progress(ctx.graph.nodes, desc):
                inputs, outputs = stream.around(node.name)
                qnode = ctx.plan.realised().node(node.name)
                if qnode is None or not qnode.quantized or not node.inputs or not ctx.in_scope(node):
                    continue
                score = LayerScore(ctx.plan, node.name, inputs, outputs)
                if has_tuned_weights(node):
                    search_weights(node, ctx.plan, score, factors, p["ngroups"])
                for i, t in enumerate(node.inputs):
                    if t.name not in searched:
                        searched.add(t.name)
                        search_input(i, node, ctx.plan, producers, score, factors)
        finally:
            stream.close()
