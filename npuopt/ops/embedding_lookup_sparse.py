"""EmbeddingLookupSparse (TensorFlow's embedding_lookup_sparse): inputs params [V, ...]
(the embedding table), indices (the sparse tensor's row of each id: 1-D, or its first
column), ids (each row's ids into params) and weights (one per id); `combiner` SUM, MEAN
or SQRTN (any case), `max_norm` NONE (the tool chain supports no other). The first n
ids, weights and indices are read, n the fewest of them: ids past the indices (a batch's
samples after the first) are not read, as the tool chain reads them, and fewer ids than
indices (a zero-input forward's one id, where the IR's ids are a 1-D graph input) take
the first indices and weights. Rows j = 0 ..
last index of the top combine params[ids] * weights over the ids whose index is j: SUM
their sum, MEAN the sum / sum(weights), SQRTN the sum / sqrt(sum(weights^2)) (0 where the
divisor is 0); a shape that follows the data. Indices must ascend and ids lie in [0, V).

Quantized, the tool chain's forms (P = q_params + zp, W = q_weights + zp, S = the segment
sums of P[ids] * W, int64):
* SUM: out = R(S, M, s), M/2^s ~ s_out / (s_params * s_weights);
* MEAN: M/2^s ~ s_out / s_params (15 bits); A = S * M, B = the segment sums of W; a and b
  the bits of the smallest ranges holding A and B (signed where params / weights can be
  negative), A >>= max(a - 32, 0) clamped to 32 bits, B >>= max(b - 16, 0) clamped to 16,
  out = R(trunc(fl64(A) / B) (0 where B = 0), 1, s - shift_A + shift_B);
* SQRTN: `scale_value = [M0, M1]`, `shift_value = [s0, s1]`, `reciprocal_shift_value` p and
  the isqrt table `lut`: x = R(S, M0, s0) into params' integer range, then Normalization's
  L2 product by the inverse square root of the segment sums of W^2 (_rsqrt.times_rsqrt),
  out = R(y, 1, s1 + 31 - p - t). M0/2^s0 ~ s_sum / (s_params * s_weights) with s_sum the
  symmetric scale of the calibrated sums S, M1/2^s1 ~ s_out * s_weights / s_sum."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale, Shift
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._stats import bits_holding, keep_internal, quantize_internal_symmetric, stored_rescales
from ._layout import param_choice
from ._rsqrt import times_rsqrt, write_reciprocal_shift
from ._segments import segment_count, segment_sums

COMBINERS = ["SUM", "MEAN", "SQRTN"]
MEAN_MULTIPLIER_BITS = 16
MEAN_SUM_BITS, MEAN_WEIGHT_BITS = 32, 16


def combiner(node) -> str:
    norm = node.get_param("max_norm", "NONE")
    if str(norm).upper() != "NONE":
        raise IRError(f"layer '{node.name}' (EmbeddingLookupSparse): max_norm {norm} is not supported (the tool "
                      f"chain supports NONE only)")
    return param_choice(node, "combiner", COMBINERS)


def _operands(node):
    """(params, segment index of each id, ids, weights) as the tool chain takes them, checked."""
    check_inputs(node, (4,))
    params, indices, ids, weights = (t.betensor for t in node.inputs)
    indices = indices.to(torch.int64)
    indices = indices if indices.dim() == 1 else indices.reshape(-1, indices.shape[-1])[:, 0]
    ids, weights = ids.reshape(-1).to(torch.int64), weights.reshape(-1)
    n = min(ids.numel(), weights.numel(), indices.numel())  # the ids with an index and a weight
    if not n:
        raise IRError(f"layer '{node.name}' (EmbeddingLookupSparse): {indices.numel()} indices, {ids.numel()} ids "
                      f"and {weights.numel()} weights: nothing to look up")
    indices, ids, weights = indices[:n], ids[:n], weights[:n]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= params.shape[0]):
        raise IRError(f"layer '{node.name}' (EmbeddingLookupSparse): ids must lie in [0, {params.shape[0]}), got "
                      f"{int(ids.min())}..{int(ids.max())}")
    if bool((indices[1:] < indices[:-1]).any()):
        raise IRError(f"layer '{node.name}' (EmbeddingLookupSparse): the indices must ascend")
    return params, indices, ids, weights.reshape((-1,) + (1,) * (params.dim() - 1))


def _divided(sums: torch.Tensor, divisor: torch.Tensor) -> torch.Tensor:
    out = sums / divisor
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def _float(node, how: str):
    params, indices, ids, weights = _operands(node)
    params, weights = computing_float(params), computing_float(weights)
    count = segment_count(node, indices)
    sums = segment_sums(params[ids] * weights, indices, count)
    if how == "SUM":
        out = sums
    else:
        divisor = segment_sums(weights if how == "MEAN" else weights * weights, indices, count)
        out = _divided(sums, divisor if how == "MEAN" else torch.sqrt(divisor))
    keep_internal(node, [sums])
    node.outputs[0].betensor = out
    return out


def _mean_integers(node, sums, w, indices, count, out):
    params_t, weights_t = node.inputs[0], node.inputs[3]
    r = Rescale.read(node)
    params_signed = params_t.qmin + int(params_t.zerop) < 0
    weights_signed = weights_t.qmin + int(weights_t.zerop) < 0
    a = sums * r.multiplier
    b = segment_sums(w, indices, count)
    shift_a = max(bits_holding(int(a.min()), int(a.max()), params_signed) - MEAN_SUM_BITS, 0)
    shift_b = max(bits_holding(int(b.min()), int(b.max()), weights_signed) - MEAN_WEIGHT_BITS, 0)
    a = (a >> shift_a).clamp(*qmath.integer_range(MEAN_SUM_BITS, params_signed))
    b = (b >> shift_b).clamp(*qmath.integer_range(MEAN_WEIGHT_BITS, weights_signed)).expand_as(a)
    y = torch.where(b != 0, torch.trunc(a.to(torch.float64) / b), torch.zeros_like(a, dtype=torch.float64))
    return qmath.requantize(y, 1, r.shift - shift_a + shift_b, out.zerop, out.qmin, out.qmax)


def _sqrtn_integers(node, sums, w, indices, count, out):
    params_t = node.inputs[0]
    r = stored_rescales(node, 2)
    p = Shift.read(node, "reciprocal_").value
    lo, hi = qmath.integer_range(params_t.qbits, params_t.qmin + int(params_t.zerop) < 0)
    x = qmath.requantize(sums, r.multipliers[0], r.shifts[0], 0, lo, hi).to(torch.int64)
    y, e = times_rsqrt(x, r.multipliers[1], p, segment_sums(w * w, indices, count))
    shift = r.shifts[1] + e  # per row
    return qmath.requantize(y, torch.ones_like(shift), shift, out.zerop, out.qmin, out.qmax)


@op_register(OpType.EmbeddingLookupSparse, "1.0", data_dependent_shapes=True)
def embedding_lookup_sparse_forward(self, *args):
    how = combiner(self)
    if not self.quantized:
        return _float(self, how)
    params, indices, ids, w = _operands(self)
    params_t, weights_t, out = self.inputs[0], self.inputs[3], self.outputs[0]
    p = params.to(torch.int64)[ids] + int(params_t.zerop)
    w = w.to(torch.int64) + int(weights_t.zerop)
    count = segment_count(self, indices)
    sums = segment_sums(p * w, indices, count)
    if how == "SUM":
        r = Rescale.read(self)
        y = qmath.requantize(sums, r.multiplier, r.shift, out.zerop, out.qmin, out.qmax)
    elif how == "MEAN":
        y = _mean_integers(self, sums, w, indices, count, out)
    else:
        y = _sqrtn_integers(self, sums, w, indices, count, out)
    return QT.store_output(self, y, out)


@quant_register(OpType.EmbeddingLookupSparse, "1.0")
def embedding_lookup_sparse_quantize(self, *args):
    """The top from its calibrated range (signed when params or weights can be
    negative); the sums' placeholder on a symmetric grid (SQRTN scales through it)."""
    how = combiner(self)
    QT.check_quantized_inputs(self)
    params_t, weights_t, out = self.inputs[0], self.inputs[3], self.outputs[0]
    signed = params_t.qmin + int(params_t.zerop) < 0 or weights_t.qmin + int(weights_t.zerop) < 0
    sums_t = self.placeholders[0]
    quantize_internal_symmetric(self, sums_t, signed)
    QT.quantize_activation(self, out, signed=signed)
    bits = settings_of(self).activation_bits
    if how == "SUM":
        Rescale.from_ratio(out.scale / (params_t.scale * weights_t.scale), bits).write(self)
    elif how == "MEAN":
        Rescale.from_ratio(out.scale / params_t.scale, MEAN_MULTIPLIER_BITS).write(self)
    else:
        first = Rescale.from_ratio(sums_t.scale / (params_t.scale * weights_t.scale), bits)
        second = Rescale.from_ratio(out.scale * weights_t.scale / sums_t.scale, bits)
        BranchRescales([first.multiplier, second.multiplier], [first.shift, second.shift],
                       [first.multiplier_type, second.multiplier_type],
                       [first.shift_type, second.shift_type]).write(self)
        write_reciprocal_shift(self, sums_t.qbits + (0 if sums_t.dtype.is_signed else 1), second.multiplier)
