"""The planned range of a mean/variance layer's input wider than 8 bits (LayerNorm,
GroupNorm, InstanceNorm, MVN).

The tool chain's wide path (docs/integer-semantics.md, "LayerNorm") normalizes with the
integer g = 2^15 / sqrt(V), V the variance in input steps: an input whose standard
deviation spans sigma steps keeps about log2(2^15 / sigma) bits of g. A 16-bit tensor
quantized to its range spans thousands of steps and keeps 3 or 4 bits (transformer_encoder
under w16a16: output cosine 0.99679, below 8 bits' 0.99924). The relative errors of d
(1 / sigma) and of g (sigma / 2^15) balance at sigma = 2^7.5 steps, so npuopt widens such an
input's range until its standard deviation spans at most that many steps (never narrower
than calibrated; 0.99915 then). Only where every reader of the tensor is such a layer: a
coarser grid would cost any other reader."""
import math

from .settings import settings_of
from .tensors import activation_range, plan_activation_range

NORM_TYPES = ("LayerNorm", "GroupNorm", "InstanceNorm", "MVN")
BALANCED_STEPS = 2 ** 7.5   # sigma in input steps where the errors of d and of g balance


def norm_inputs(graph) -> list:
    """(tensor, its producer) of every mean/variance layer's input that only such layers read."""
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    readers = {}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    return [(node.inputs[0], producer[node.inputs[0].name]) for node in graph.nodes
            if node.type in NORM_TYPES and node.inputs and node.inputs[0].name in producer and
            all(r.type in NORM_TYPES for r in readers[node.inputs[0].name])]


def widen_norm_inputs(plan) -> None:
    """Plan the widened ranges (tensors.plan_activation_range) on the plan's float graph."""
    widened = []
    for t, src in norm_inputs(plan.graph):
        if t.planned_range is not None or t.statistics is None or t.statistics.empty:
            continue
        st = settings_of(src)
        if st.activation_bits <= 8 or st.trigger_float_op or st.fp8_activations:
            continue
        lo, hi = activation_range(src, t, st.quantize_method_for_activation.symmetric)
        wide = float(t.statistics.std) * ((1 << (st.activation_bits - 1)) - 1) / BALANCED_STEPS
        extent = max(abs(lo), abs(hi))
        if math.isfinite(wide) and extent > 0 and wide > extent:
            plan_activation_range(t, lo * wide / extent, hi * wide / extent)
            widened.append(src.name)
    plan.replan(*widened)
