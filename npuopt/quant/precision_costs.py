"""What a choice of per-layer settings costs, for a mixed-precision search to weigh
without building or running anything: the average weight bits (weighted by parameter
count), the weight bytes, a bit-operations estimate and the number of
Quantize/DeQuantize layers.

Weights are those of the linear layer types (convolutions, fully connected: a
normalization's scale is not counted). Weight bits are the stored format's: the integer
bits, 8 (4) for fp8 (fp4) weights, 16/32 for a layer kept in float. Bit-operations are, per sample, each weighted layer's
multiply-accumulates (its weights times its output positions) times its weight bits
times the bits of the activations it reads (its first input's producer's); scales,
zero points and biases are not counted."""
import dataclasses
import math
import re
from typing import Dict

from .quantizer import count_boundaries, stays_float
from .settings import QuantSettings
from .tensors import WEIGHT_ONLY_TYPES as LINEAR_TYPES  # the layer types whose weights count


@dataclasses.dataclass(frozen=True)
class Sizes:
    average_weight_bits: float
    weight_bytes: float
    bitops: float          # per sample
    conversions: int       # Quantize/DeQuantize layers

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def weight_bits_of(st: QuantSettings) -> int:
    """Bits of a layer's stored weights under `st`."""
    if st.trigger_float_op and not st.weight_only:
        return st.float_dtype.bits
    fmt = st.weights_format
    return int(re.search(r"\d+", fmt).group()) if fmt != "int" else int(st.weight_bits)


def activation_bits_of(st: QuantSettings, in_float: bool) -> int:
    """Bits of a layer's output activations under `st`."""
    if in_float:
        return st.float_dtype.bits
    return 8 if st.fp8_activations else int(st.activation_bits)


class Costs:
    """The graph's parameter counts and multiply-accumulates, taken once; `sizes` of any settings."""

    def __init__(self, graph):
        self.graph = graph
        self.params: Dict[str, int] = {}
        self.macs: Dict[str, float] = {}
        producer = {t.name: n for n in graph.nodes for t in n.outputs}
        self.reads: Dict[str, str] = {}
        for node in graph.nodes:
            w = node.constants.get("weights")
            if w is None or not node.outputs or node.type not in LINEAR_TYPES:
                continue
            self.params[node.name] = w.betensor.numel()
            out = node.outputs[0].ir_shape
            per_sample = math.prod(int(d) for d in out[1:]) if len(out) > 1 else 1
            channels = int(w.betensor.shape[0]) or 1
            self.macs[node.name] = float(w.betensor.numel()) * per_sample / channels
            if node.inputs:
                self.reads[node.name] = producer[node.inputs[0].name].name

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    def sizes(self, settings: Dict[str, QuantSettings]) -> Sizes:
        nodes = self.graph.nodes
        in_float = {n.name for n in nodes if stays_float(n, settings)}
        weight_bits = {name: weight_bits_of(settings[name]) for name in self.params}
        stored = sum(self.params[n] * weight_bits[n] for n in self.params)
        bitops = sum(self.macs[n] * weight_bits[n] *
                     activation_bits_of(settings[self.reads[n]], self.reads[n] in in_float)
                     for n in self.params if n in self.reads)
        return Sizes(stored / max(self.total_params, 1), stored / 8, bitops,
                     count_boundaries(self.graph, in_float, settings))
