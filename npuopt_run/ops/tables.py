"""Tables, statistics and recommender layers (docs/ir-ops.md "Tables, statistics and
recommenders"; docs/integer-semantics.md, sections of the same names): SegmentReduce,
EmbeddingLookupSparse, AccidentalHits, InTopK, Count, SufficientStatistics,
NormalizedMoments, ZeroFraction. R(X, M, s) = requantize into the top; A = q + zp.

* Segments: ids sorted ascending, the last one names the last segment (its rows: last + 1),
  a segment no row names is 0 (PROD: 1). SegmentReduce cuts ids longer than the data's
  rows and pads shorter ones with the last; integer form (SUM): R(sum A, M, s).
* EmbeddingLookupSparse: S = segment sums of P[ids] * W (P, W the table's and the
  weights' A); SUM R(S, M, s); MEAN: A' = S * M, B = segment sums of W, each shifted down
  to 32 / 16 bits by how far the bits holding its range pass them, clamped,
  R(trunc(fl64(A') / B), 1, s - a + b) (0 where B = 0); SQRTN: x = R(S, M0, s0) into
  params' range, Normalization's product by the inverse square root of the sums of W^2,
  R(y, 1, s1 + e).
* AccidentalHits: the (row, candidate) pairs where a true class equals a candidate, in
  row, true position, candidate order, cut to the IR's length; InTopK: the target's
  value equals one of the row's k largest; on stored integers alike.
* Count: torch.histc's float32 binning, trunc(fl32(fl32(x - lo) * bins) / fl32(hi - lo)),
  or x in [e_i, e_(i+1)) of linspace's float32 edges (start + step * i, end - step * (n -
  1 - i) past the middle, each rounded once).
* SufficientStatistics (scale_value/shift_value = [out0, out1, in0, in1]): X_i = R(A_i,
  M_in_i, s_in_i) into 32 bits, D = X_0 - X_1; top 0 trunc32(clamp32(sum D) * M_0 / 2^s_0)
  - zp (float32 when s_0 < 0); top 1 from D^2's 16-bit halves summed, ((H * M_1 << 16) +
  L * M_1) >> s_1 - zp; both clamped into the top.
* NormalizedMoments: mean R(A_sum * M_sum + A_shift * M_shift, M, s) (mean_scale_value
  = [M, M_sum, M_shift]); variance R(A_squares * M_sq - lut[q_sum - dtype min] * M_lut,
  M', s') (var_scale_value).
* ZeroFraction: per sample floor((Z * E + floor(n / 2)) / n) - zp, Z the zeros among A,
  E = output_scale.

SegmentReduce, EmbeddingLookupSparse, AccidentalHits and ZeroFraction give tops whose
shapes follow the data (or span the batch): the runner takes the IR's shapes as bounds
and runs a batch of such a model as one."""
import numpy as np

from ..intmath import lut_lookup, requantize
from .layernorm import axes_param
from .norm_stats import times_rsqrt
from .stage import int_param, int_value, stored_ints

DATA_DEPENDENT_SHAPES = ("SegmentReduce", "EmbeddingLookupSparse", "AccidentalHits", "ZeroFraction")
SEGMENT_METHODS = {"SUM": np.sum, "MEAN": np.mean, "MAX": np.max, "MIN": np.min, "PROD": np.prod}
COMBINERS = ("SUM", "MEAN", "SQRTN")
INT32 = (-(1 << 31), (1 << 31) - 1)
UINT32_MAX = (1 << 32) - 1
HALF_BITS = 16


def _inputs(layer, xs, n):
    if len(xs) != n:
        raise layer.error(f"takes {n} inputs, the IR gives {len(xs)}", "layer_bottom")


def _zp(infos, i) -> int:
    return int(infos[i].zp or 0)


def _top(layer, i: int = 0):
    """zp, qmin, qmax of top i."""
    return int_value(layer, "layer_top_zp", layer.top_zps[i]), *layer.top_range(i)


def _range(bits: int, signed: bool):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _bits_holding(lo: int, hi: int, signed: bool) -> int:
    signed = signed or lo < 0
    bits = 1 if signed else 0
    while not (_range(bits, signed)[0] <= lo and hi <= _range(bits, signed)[1]):
        bits += 1
    return bits


def _rescales(layer, prefix: str, count: int):
    """(multipliers, shifts) of a `<prefix>scale_value` list of `count` and its shift(s)."""
    m = np.atleast_1d(stored_ints(layer, f"{prefix}scale", f"{prefix}scale_value"))
    s = np.atleast_1d(stored_ints(layer, f"{prefix}shift", f"{prefix}shift_value"))
    if m.size != count:
        raise layer.error(f"{prefix}scale_value must hold {count} multipliers, it holds {m.size}",
                          f"{prefix}scale_value")
    return [int(v) for v in m], [int(v) for v in s]


# ---- segments -------------------------------------------------------------------------
def _last_segment(layer, ids: np.ndarray) -> int:
    if not ids.size or ids[-1] < 0:
        raise layer.error("the segment ids must end with a non-negative id")
    return int(ids[-1]) + 1


def _per_segment(values: np.ndarray, ids: np.ndarray, count: int, reduce) -> np.ndarray:
    """reduce(rows of segment j) for j < count; empty segments 0 (np.prod: 1)."""
    empty = 1 if reduce is np.prod else 0
    out = np.full((count,) + values.shape[1:], empty, dtype=values.dtype)
    for j in range(count):
        rows = values[ids == j]
        if len(rows):
            out[j] = reduce(rows, axis=0)
    return out


def _reduce_ids(layer, xs):
    _inputs(layer, xs, 2)
    ids = np.asarray(xs[1]).reshape(-1).astype(np.int64)
    _last_segment(layer, ids)
    rows = xs[0].shape[0]
    ids = ids[:rows] if ids.size >= rows else np.concatenate([ids, np.full(rows - ids.size, ids[-1])])
    return ids, _last_segment(layer, ids)


def _method(layer) -> str:
    method = str(layer.param("method", "SUM")).upper()
    if method not in SEGMENT_METHODS:
        raise layer.error(f"unsupported method '{method}'", "method")
    return method


def segment_reduce_float(layer, xs, infos):
    ids, count = _reduce_ids(layer, xs)
    return [_per_segment(xs[0], ids, count, SEGMENT_METHODS[_method(layer)])]


def segment_reduce_int(layer, xs, infos):
    if _method(layer) != "SUM":
        raise layer.error("an integer SegmentReduce computes SUM only", "method")
    ids, count = _reduce_ids(layer, xs)
    sums = _per_segment(xs[0] + _zp(infos, 0), ids, count, np.sum)
    return [requantize(layer, sums, int_param(layer, "scale_value"), int_param(layer, "shift_value"), *_top(layer))]


# ---- EmbeddingLookupSparse -----------------------------------------------------------
def _lookup(layer, xs):
    """(params, index of each id, ids, weights as a column), checked."""
    _inputs(layer, xs, 4)
    if str(layer.param("max_norm", "NONE")).upper() != "NONE":
        raise layer.error(f"max_norm {layer.param('max_norm')} is not supported", "max_norm")
    params, index, ids, weights = xs
    index = np.asarray(index).astype(np.int64)
    index = index if index.ndim == 1 else index.reshape(-1, index.shape[-1])[:, 0]
    ids, weights = np.asarray(ids).reshape(-1).astype(np.int64), np.asarray(weights).reshape(-1)
    n = min(ids.size, weights.size, index.size)  # the ids with an index and a weight
    if not n:
        raise layer.error(f"{index.size} indices, {ids.size} ids and {weights.size} weights: nothing to look up")
    index, ids, weights = index[:n], ids[:n], weights[:n]
    if ids.size and (ids.min() < 0 or ids.max() >= params.shape[0]):
        raise layer.error(f"ids must lie in [0, {params.shape[0]})")
    if np.any(np.diff(index) < 0):
        raise layer.error("the indices must ascend")
    return params, index, ids, weights.reshape((-1,) + (1,) * (params.ndim - 1))


def _combiner(layer) -> str:
    how = str(layer.param("combiner")).upper()
    if how not in COMBINERS:
        raise layer.error(f"unsupported combiner '{how}'", "combiner")
    return how


def embedding_lookup_sparse_float(layer, xs, infos):
    how = _combiner(layer)
    params, index, ids, w = _lookup(layer, xs)
    count = _last_segment(layer, index)
    sums = _per_segment(params[ids] * w, index, count, np.sum)
    if how == "SUM":
        return [sums]
    divisor = _per_segment(w if how == "MEAN" else w * w, index, count, np.sum)
    divisor = divisor if how == "MEAN" else np.sqrt(divisor)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = sums / divisor
    return [np.where(np.isfinite(out), out, 0.0)]


def embedding_lookup_sparse_int(layer, xs, infos):
    how = _combiner(layer)
    params, index, ids, w = _lookup(layer, xs)
    count = _last_segment(layer, index)
    p, w = params[ids] + _zp(infos, 0), w + _zp(infos, 3)
    sums = _per_segment(p * w, index, count, np.sum)
    if how == "SUM":
        return [requantize(layer, sums, int_param(layer, "scale_value"), int_param(layer, "shift_value"),
                           *_top(layer))]
    if how == "MEAN":
        return [_mean(layer, sums, _per_segment(w, index, count, np.sum), infos)]
    (m0, m1), (s0, s1) = _rescales(layer, "", 2)
    params_info = infos[0]
    x = requantize(layer, sums, m0, s0, 0, *_range(params_info.dtype.bits, params_info.qmin + _zp(infos, 0) < 0))
    y, e = times_rsqrt(layer, x, m1, int_param(layer, "reciprocal_shift_value"),
                       _per_segment(w * w, index, count, np.sum))
    return [requantize(layer, y, 1, s1 + e, *_top(layer))]


def _mean(layer, sums, wsums, infos):
    params_signed = infos[0].qmin + _zp(infos, 0) < 0
    weights_signed = infos[3].qmin + _zp(infos, 3) < 0
    a = sums * int_param(layer, "scale_value")
    sa = max(_bits_holding(int(a.min()), int(a.max()), params_signed) - 32, 0)
    sb = max(_bits_holding(int(wsums.min()), int(wsums.max()), weights_signed) - 16, 0)
    a = np.clip(a >> sa, *_range(32, params_signed))
    b = np.broadcast_to(np.clip(wsums >> sb, *_range(16, weights_signed)), a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(b != 0, np.trunc(a.astype(np.float64) / b), 0.0).astype(np.int64)
    return requantize(layer, y, 1, int_param(layer, "shift_value") - sa + sb, *_top(layer))


# ---- AccidentalHits, InTopK -------------------------------------------------------------
def accidental_hits(layer, xs, infos):
    _inputs(layer, xs, 2)
    true, sampled = (np.asarray(x).astype(np.int64) for x in xs)
    if true.ndim != 2 or sampled.ndim != 1 or len(layer.tops) != 3:
        raise layer.error(f"true classes {list(true.shape)} (2-D), candidates {list(sampled.shape)} (1-D), three "
                          f"tops")
    length = layer.top_shapes[0][0]
    pairs = [(d, s) for d in range(true.shape[0]) for t in range(true.shape[1]) for s in range(sampled.size)
             if true[d, t] == sampled[s]]
    found = np.array(pairs[:length], np.int64).reshape(-1, 2)
    rows, ids = np.zeros(length, np.int64), np.zeros(length, np.int64)
    rows[:len(found)], ids[:len(found)] = found[:, 0], found[:, 1]
    return [rows, ids, np.array([len(found)], np.int64)]


def in_top_k(layer, xs, infos):
    _inputs(layer, xs, 2)
    predictions, targets = xs[0], np.asarray(xs[1]).reshape(-1).astype(np.int64)
    if predictions.ndim != 2 or predictions.shape[0] != targets.size:
        raise layer.error(f"predictions {list(predictions.shape)} and {targets.size} targets do not fit")
    k = int_param(layer, "k")
    if k < 0:
        raise layer.error(f"k must be at least 0, got {k}", "k")
    classes = predictions.shape[1]
    k = min(k, classes)
    top = -np.sort(-predictions, axis=1)[:, :k]
    picked = predictions[np.arange(targets.size), np.clip(targets, 0, classes - 1)]
    valid = (targets >= 0) & (targets < classes)
    return [((top == picked[:, None]).any(axis=1) & valid).astype(np.int64)]


# ---- Count -----------------------------------------------------------------------------
def _linspace_f32(lo: float, hi: float, steps: int) -> np.ndarray:
    """torch.linspace's float32 values: start + step * i, end - step * (steps - 1 - i) from
    the middle on, each rounded once (a fused multiply-add)."""
    s, e = np.float32(lo), np.float32(hi)
    step = np.float32(np.float32(e - s) / np.float32(steps - 1))
    i = np.arange(steps)
    up = (np.float64(s) + np.float64(step) * i).astype(np.float32)
    down = (np.float64(e) - np.float64(step) * (steps - 1 - i)).astype(np.float32)
    return np.where(i < steps // 2, up, down)


def _histc(x: np.ndarray, bins: int, lo: float, hi: float) -> np.ndarray:
    """torch.histc in float32: values outside [lo, hi] not counted, hi in the last bin."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    inside = x[(x >= lo32) & (x <= hi32)]
    pos = np.trunc(((inside - lo32) * np.float32(bins)) / (hi32 - lo32)).astype(np.int64)
    return np.bincount(np.minimum(pos, bins - 1), minlength=bins)


def count(layer, xs, infos):
    _inputs(layer, xs, 1)
    bins = int_param(layer, "nbins")
    lo, hi = (layer.param(k) for k in ("min", "max"))
    discrete = layer.param("discrete", True)
    if bins < 1 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (lo, hi)) or lo == hi \
            or discrete not in (True, False):
        raise layer.error(f"nbins {bins}, min {lo}, max {hi}, discrete {discrete} do not make a histogram")
    out = []
    for sample in np.asarray(xs[0]).astype(np.float32).reshape(xs[0].shape[0], -1):
        if not discrete:
            e = _linspace_f32(lo, hi, bins + 1)
            out.append(((sample[None, :] >= e[:-1, None]) & (sample[None, :] < e[1:, None])).sum(axis=1))
        else:
            out.append(_histc(sample, bins, lo, hi) if hi > lo else _histc(sample, bins, hi, lo)[::-1])
    counts = np.array(out, np.int64)
    shape = layer.top_shapes[0]
    return [counts.reshape((counts.shape[0],) + tuple(shape[1:])) if len(shape) > 1 else counts]


# ---- SufficientStatistics, NormalizedMoments ---------------------------------------------
def _stats_tops(layer, xs, n_in):
    _inputs(layer, xs, n_in)
    if len(layer.tops) != 2:
        raise layer.error(f"{len(layer.tops)} tops; it has 2", "layer_top")


def sufficient_statistics_float(layer, xs, infos):
    _stats_tops(layer, xs, 2)
    d = xs[0] - xs[1]
    axes = axes_param(layer, d.ndim)
    return [d.sum(axis=axes, keepdims=True), (d * d).sum(axis=axes, keepdims=True)]


def _torch_shift_right(v: np.ndarray, s: int) -> np.ndarray:
    return v >> (s if 0 <= s < 64 else 63)


def sufficient_statistics_int(layer, xs, infos):
    _stats_tops(layer, xs, 2)
    (m0, m1, mx, ms), (s0, s1, sx, ss) = _rescales(layer, "", 4)
    x = requantize(layer, xs[0] + _zp(infos, 0), mx, sx, 0, *INT32)
    shift = requantize(layer, xs[1] + _zp(infos, 1), ms, ss, 0, *INT32)
    d = x - shift
    axes = axes_param(layer, d.ndim)
    total = np.clip(d.sum(axis=axes, keepdims=True), *INT32) * m0
    if s0 >= 0:
        first = np.sign(total) * (np.abs(total) >> s0)
    else:  # a float32 quotient by 2^s0
        first = np.trunc(total.astype(np.float32) * np.float32(2.0 ** -s0)).astype(np.int64)
    first = ((first + (1 << 31)) % (1 << 32)) - (1 << 31)
    v = np.clip(d * d, 0, UINT32_MAX)
    high = v >> HALF_BITS
    low = v - (high << HALF_BITS)
    high, low = (np.clip(h.sum(axis=axes, keepdims=True), 0, UINT32_MAX) for h in (high, low))
    second = _torch_shift_right((high * m1 << HALF_BITS) + low * m1, s1)
    zp0, lo0, hi0 = _top(layer, 0)
    zp1, lo1, hi1 = _top(layer, 1)
    return [np.clip(first - zp0, lo0, hi0), np.clip(second - zp1, lo1, hi1)]


def _counts(layer) -> int:
    n = layer.param("counts")
    if isinstance(n, bool) or not isinstance(n, (int, float)) or int(n) < 1:
        raise layer.error(f"counts {n!r} must be a number of at least 1", "counts")
    return int(n)


def normalized_moments_float(layer, xs, infos):
    _stats_tops(layer, xs, 3)
    mean = xs[0] / _counts(layer)
    return [mean + xs[2], xs[1] / _counts(layer) - mean * mean]


def normalized_moments_int(layer, xs, infos):
    _stats_tops(layer, xs, 3)
    _counts(layer)
    a = [x + _zp(infos, i) for i, x in enumerate(xs)]
    (m, m_sum, m_shift), s = _rescales(layer, "mean_", 3)
    mean = requantize(layer, a[0] * m_sum + a[2] * m_shift, m, s[0], *_top(layer, 0))
    (v, v_sq, v_lut), sv = _rescales(layer, "var_", 3)
    table, dtype = layer.const("lut"), layer.const_types["lut"]
    bits = infos[0].dtype.bits
    base = _range(bits, infos[0].dtype.qmin < 0)[0]
    square = lut_lookup(layer, xs[0] - base, table, bits, dtype.qmin, dtype.qmax)
    return [mean, requantize(layer, a[1] * v_sq - square * v_lut, v, sv[0], *_top(layer, 1))]


# ---- ZeroFraction ------------------------------------------------------------------------
def _zeros(layer, xs, shift: int):
    _inputs(layer, xs, 1)
    x = np.asarray(xs[0])
    rows = x.reshape(x.shape[0] if x.ndim else 1, -1)
    zeros = ((rows.astype(np.int64) + shift if shift else rows) == 0).sum(axis=1)
    one = len(layer.top_shapes[0]) == 0 and zeros.size == 1
    return (zeros.reshape(()) if one else zeros), rows.shape[1]


def zero_fraction_float(layer, xs, infos):
    zeros, n = _zeros(layer, xs, 0)
    return [np.asarray(zeros / n)]


def zero_fraction_int(layer, xs, infos):
    zeros, n = _zeros(layer, xs, _zp(infos, 0))
    scale = int_param(layer, "output_scale")
    return [np.asarray((zeros * scale + n // 2) // n - _top(layer)[0], np.int64)]


FLOAT = {"SegmentReduce": segment_reduce_float, "EmbeddingLookupSparse": embedding_lookup_sparse_float,
         "AccidentalHits": accidental_hits, "InTopK": in_top_k, "Count": count,
         "SufficientStatistics": sufficient_statistics_float, "NormalizedMoments": normalized_moments_float,
         "ZeroFraction": zero_fraction_float}
INT = {"SegmentReduce": segment_reduce_int, "EmbeddingLookupSparse": embedding_lookup_sparse_int,
       "AccidentalHits": accidental_hits, "InTopK": in_top_k, "Count": count,
       "SufficientStatistics": sufficient_statistics_int, "NormalizedMoments": normalized_moments_int,
       "ZeroFraction": zero_fraction_int}
