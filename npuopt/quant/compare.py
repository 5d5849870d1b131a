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
    if t.dtype.is_minifloat and t.is_quantized:  # fp8 values: real * scale
        return qmath.dequantize(v, t.broadcast_scale, t.broadcast_zerop)
    if v.is_floating_point() or t.qinvariant or not t.is_quantized:
        return v.to(torch.float32) if v.is_floating_point() else v
    return qmath.dequantize(v, t.scale, t.zerop)


def layer_similarity(float_graph, qgraph, inputs: List[torch.Tensor]) -> List[dict]:
    """Cosine similarity and MSE of every tensor both graphs compute, worst first. The
    quantized graph's tensors (integers, mostly 8-bit) are kept; each float tensor is
    compared as its layer computed it and then released by the forward, as float
    tensors four times their size held all at once were the largest share of a large
    model's evaluation."""
    qgraph.forward(inputs, keep_tensors=True)
    quantized = {t.name: t for node in qgraph.nodes if node.type not in BOUNDARY_TYPES for t in node.outputs}
    found = {}  # tensor name -> (cosine, mse); a graph that runs its samples one by one keeps the last one's

    def compare(node):
        for t in node.outputs:
            q = quantized.get(t.name)
            if q is not None and t.betensor.is_floating_point() and t.betensor.shape == q.betensor.shape:
                found[t.name] = _similarity(t.betensor.detach().to(torch.float32), dequantized(q))

    float_graph.forward(inputs, after_node=compare)
    rows = [{"layer": node.name, "type": node.type, "tensor": t.name, "quantized": bool(node.quantized),
             "cosine": found[t.name][0], "mse": found[t.name][1]}
            for node in qgraph.nodes if node.type not in BOUNDARY_TYPES for t in node.outputs if t.name in found]
    for g in (float_graph, qgraph):
        for t in g.tensors:
            t.betensor = torch.zeros(())
    rows.sort(key=lambda r: (r["cosine"] if math.isfinite(r["cosine"]) else -2.0))
    return rows


def _similarity(ref: torch.Tensor, got: torch.Tensor) -> tuple:
    """(cosine, mse) of two tensors' finite elements, in float64."""
    a, b = ref.reshape(-1).double(), got.reshape(-1).double()
    finite = torch.isfinite(a) & torch.isfinite(b)
    a, b = a[finite], b[finite]
    denom = float(a.norm() * b.norm())
    cos = float((a * b).sum()) / denom if denom > 0 else (1.0 if float(a.norm() + b.norm()) == 0 else 0.0)
    mse = float(((a - b) ** 2).mean()) if a.numel() else 0.0
    return cos, mse
