"""Count (a histogram per sample; the parser writes it for TensorFlow's Mask R-CNN class
counts): `min`, `max`, `nbins` (required), `discrete` (default true). Each sample's
elements are counted into nbins equal bins between min and max, as the tool chain counts
them: discrete, torch.histc in float32 (bin floor((x - min) * nbins / (max - min)), the
last bin holding max, values outside [min, max] not counted; min > max counts from max
to min and lists the bins from the top down); not discrete, x in [e_i, e_(i+1)) with
e = linspace(min, max, nbins + 1) in float32. Top: [batch, nbins] counts (int32).

Quantized: the same on the stored integers, with min and max on the input's grid
(min * scale - zp: the tool chain's quantizer writes round(min * scale), which counts
an input with a zero point in shifted bins); the top unscaled, of max(16, the input's
bits) bits, unsigned (signed with force_dtype_int). (The tool chain gives the counts the
input's zero point, so that they would read as count + zp; npuopt's zero point is 0.)"""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import bool_param, index_output_quantization, int_param

MIN_BITS = 16


def _bounds(node):
    values = [node.get_param(k) for k in ("min", "max")]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise IRError(f"layer '{node.name}' (Count): min and max must be numbers, got {values}")
    if values[0] == values[1]:
        raise IRError(f"layer '{node.name}' (Count): min and max must differ, both are {values[0]}")
    return float(values[0]), float(values[1])


def histogram(x: torch.Tensor, bins: int, lo: float, hi: float, discrete: bool) -> torch.Tensor:
    """Counts of one sample's elements (flattened) in `bins` bins from lo to hi."""
    x = x.reshape(-1).to(torch.float32)
    if discrete:
        if hi > lo:
            return torch.histc(x, bins, lo, hi)
        return torch.flip(torch.histc(x, bins, hi, lo), [0])
    edges = torch.linspace(lo, hi, bins + 1, device=x.device)
    return ((x[None, :] >= edges[:-1, None]) & (x[None, :] < edges[1:, None])).sum(dim=1)


@op_register(OpType.Count, "1.0")
def count_forward(self, *args):
    check_inputs(self, (1,))
    bins = int_param(self, "nbins", minimum=1)
    lo, hi = _bounds(self)
    discrete = bool_param(self, "discrete", True)
    x, out = self.inputs[0].betensor, self.outputs[0]
    counts = torch.stack([histogram(s, bins, lo, hi, discrete) for s in x]).to(torch.int64)
    if len(out.ir_shape) > 1:  # the IR's layout of a sample's bins
        counts = counts.reshape((x.shape[0],) + tuple(out.ir_shape[1:]))
    if self.quantized:
        return QT.store_output(self, counts, out)
    out.betensor = counts.to(torch.int32)
    return out.betensor


@quant_register(OpType.Count, "1.0")
def count_quantize(self, *args):
    QT.check_quantized_inputs(self)
    inp = self.inputs[0]
    lo, hi = _bounds(self)
    self.params["min"] = lo * float(inp.scale) - float(inp.zerop)
    self.params["max"] = hi * float(inp.scale) - float(inp.zerop)
    index_output_quantization(self, self.outputs[0], max(MIN_BITS, inp.qbits), bool(self.force_dtype_int))
