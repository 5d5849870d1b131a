"""Float against quantized: a quantized tensor's real values, and every layer's
similarity to the float graph (the report's per-layer table)."""
import math
from typing import List

import torch

from ..registry import BOUNDARY_TYPES
from ..tensor import PyTensor
from . import qmath


def dequantized(t: PyTensor, value: torch.Tensor = None) -> torch.Tensor:
    v = t.betensor if value is None else value
    if v.is_floating_point() or t.qinvariant or not t.is_quantized:
        return v.to(torch.float32) if v.is_floating_point() else v
    return qmath.dequantize(v, t.scale, t.zerop)


def layer_similarity(float_graph, qgraph, inputs: List[torch.Tensor]) -> List[dict]:
    """Cosine similarity and MSE of every tensor both graphs compute, worst first."""
    float_graph.forward(inputs, keep_tensors=True)
    ref = {t.name: t.betensor.detach().to(torch.float32) for t in float_graph.tensors
           if t.betensor.is_floating_point()}
    qgraph.forward(inputs, keep_tensors=True)
    rows = []
    for node in qgraph.nodes:
        if node.type in BOUNDARY_TYPES:
            continue
        for t in node.outputs:
            if t.name not in ref or ref[t.name].shape != t.betensor.shape:
                continue
            a, b = ref[t.name].reshape(-1).double(), dequantized(t).reshape(-1).double()
            finite = torch.isfinite(a) & torch.isfinite(b)
            a, b = a[finite], b[finite]
            denom = float(a.norm() * b.norm())
            cos = float((a * b).sum()) / denom if denom > 0 else (1.0 if float(a.norm() + b.norm()) == 0 else 0.0)
            mse = float(((a - b) ** 2).mean()) if a.numel() else 0.0
            rows.append({"layer": node.name, "type": node.type, "tensor": t.name,
                         "quantized": bool(node.quantized), "cosine": cos, "mse": mse})
    for g in (float_graph, qgraph):
        for t in g.tensors:
            t.betensor = torch.zeros(())
    rows.sort(key=lambda r: (r["cosine"] if math.isfinite(r["cosine"]) else -2.0))
    return rows
