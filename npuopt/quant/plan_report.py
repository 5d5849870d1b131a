"""The report's per-layer view of what quantization decided: each layer's output
grids (dtype, scale, zero point and the real range they cover) and its weights'
grid, with what a global calibration method planned for them (a chosen range of
the weights or of an output, a chosen rounding), so that a user sees the plan
beside the per-layer similarity."""
import collections
from typing import List

import torch

from . import qmath
from .weight_plans import planned_keys


def _number_or_span(v, kind=float):
    """A number, or [min, max] of a per-channel tensor (the report stays readable)."""
    if isinstance(v, torch.Tensor):
        v = v.detach().to(torch.float64).reshape(-1)
        return kind(v[0]) if v.numel() == 1 else [kind(v.min()), kind(v.max())]
    return kind(v)


def _grid(t) -> dict:
    row = {"dtype": str(t.dtype), "scale": _number_or_span(t.scale), "zerop": _number_or_span(t.zerop, int)}
    if t.qinvariant:
        row["qinvariant"] = True
    elif t.is_quantized and not t.is_per_channel:
        row["range"] = qmath.dequantize(torch.tensor([t.qmin, t.qmax]), t.scale, t.zerop).tolist()
    return row


def quantization_rows(qgraph, float_graph) -> List[dict]:
    """One row per layer of the quantized graph, in graph order."""
    planned = {n.name: [f"{what} of '{key}'" for what, attr in (("range", "planned_ranges"),
                                                                 ("rounding", "planned_integers"),
                                                                 ("values", "planned_biases"))
                        for key in planned_keys(n, attr)]
               + [f"range of output '{t.name}'" for t in n.outputs if t.planned_range is not None]
               for n in float_graph.nodes}
    rows = []
    for node in qgraph.nodes:
        row = {"layer": node.name, "type": node.type, "quantized": bool(node.quantized)}
        if node.quantized:
            row["outputs"] = {t.name: _grid(t) for t in node.outputs}
            weights = node.constants.get("weights")
            if weights is not None and weights.is_quantized:
                row["weights"] = _grid(weights)
        if planned.get(node.name):
            row["planned"] = planned[node.name]
        rows.append(row)
    return rows


def layers_briefly(qgraph, names) -> str:
    """Layers by name where they are few, else how many of each type (a decoder keeps
    thousands in float)."""
    if len(names) <= 40:
        return str(sorted(names)) if names else "none"
    types = collections.Counter(str(n.type) for n in qgraph.nodes if n.name in names)
    return f"{len(names)} layers ({', '.join(f'{t} x{k}' for t, k in sorted(types.items()))})"
