"""Reduce over a list of axes (docs/integer-semantics.md, Reduce). The reduced axes stay
with size 1 unless `keepdims=false`.

Integer forms, A = q + zp_in, R(X, M, s) = requantize(X, M, s) into the top
(M, s = scale_value, shift_value):
* MAX, MIN: of q, no rescale; ALL, ANY: whether all/any A != 0, as 0/1;
* SUM, MEAN: R(sum A);
* L1 / L2: S = sum |A| / sum A^2 clamped to [0, 2^32 - 1]; d = max(0, ceil(log2 fl32(max S)) - 16)
  over the whole batch (log2 in float32); K = min(S >> d, 65535); L1: R(K, M, s - d); L2:
  the 16-bit `sqrt_lut` looked up at clamp(round_half_even(K * M * 2^-(s - d)), 0, 65535);
* VARIANCE, UNBIASED_VARIANCE: in float32 on q, as the tool chain: m = round_half_even(fl32(sum q) / n),
  R(sum (q - m)^2); refused where a float32 step would round (sums of 2^24 or more);
* PROD: per output element, over the reduced elements in row-major order of the axes as the
  IR lists them: P = P * A, then P = floor(P / 2) until P lies in the 16-bit range (signed when
  the input's qmin + zp < 0), counting the halvings t; R(P, M, s - t).
"""
import math

import numpy as np

from ..intmath import lut_lookup, requantize
from .stage import int_param, shifted, top_bounds

METHODS = ("MEAN", "SUM", "MAX", "MIN", "PROD", "L1", "L2", "VARIANCE", "UNBIASED_VARIANCE", "ALL", "ANY")
SUM_LIMIT = (1 << 32) - 1
KEPT_BITS = 16
PROD_BITS = 16
FLOAT32_EXACT = 1 << 24


def reduce_method(layer) -> str:
    method = str(layer.param("method")).upper()
    if method not in METHODS:
        raise layer.error(f"unsupported Reduce method '{method}' ({', '.join(METHODS)})", "method")
    return method


def reduce_axes(layer, ndim: int):
    """The reduced axes, non-negative, in the IR's order."""
    axes = layer.param("axis")
    axes = [axes] if isinstance(axes, int) else axes
    if not isinstance(axes, list) or not axes or \
            not all(isinstance(a, int) and not isinstance(a, bool) and -ndim <= a < ndim for a in axes):
        raise layer.error(f"axis {layer.param('axis')} does not name axes of a {ndim}-D tensor", "axis")
    axes = [a % ndim for a in axes]
    if len(set(axes)) != len(axes):
        raise layer.error(f"axis {layer.param('axis')} names an axis twice", "axis")
    return axes


def finish(layer, out: np.ndarray, axes) -> np.ndarray:
    """The result with the reduced axes kept (size 1), or dropped when keepdims=false."""
    if layer.param("keepdims", True):
        return out
    return out.reshape([s for d, s in enumerate(out.shape) if d not in axes])


def _logical(method, nonzero: np.ndarray, axes) -> np.ndarray:
    fn = np.all if method == "ALL" else np.any
    return fn(nonzero, axis=tuple(axes), keepdims=True)


# ---- float ----------------------------------------------------------------------------
def reduce_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    method = reduce_method(layer)
    axes = reduce_axes(layer, x.ndim)
    ax = tuple(axes)
    if method in ("ALL", "ANY"):
        out = _logical(method, x != 0, axes)
    elif method == "MEAN":
        out = x.sum(axis=ax, keepdims=True)
        out = out / (x.size / out.size) if out.size else out
    elif method == "SUM":
        out = x.sum(axis=ax, keepdims=True)
    elif method == "MAX":
        out = x.max(axis=ax, keepdims=True)
    elif method == "MIN":
        out = x.min(axis=ax, keepdims=True)
    elif method == "PROD":
        out = x.prod(axis=ax, keepdims=True)
    elif method == "L1":
        out = np.abs(x).sum(axis=ax, keepdims=True)
    elif method == "L2":
        out = np.sqrt((x * x).sum(axis=ax, keepdims=True))
    else:
        n = math.prod(x.shape[a] for a in axes) - (method == "UNBIASED_VARIANCE")
        out = ((x - x.mean(axis=ax, keepdims=True)) ** 2).sum(axis=ax, keepdims=True) / n
    return [finish(layer, np.asarray(out, np.float32), axes)]


# ---- integer --------------------------------------------------------------------------
def _f32_log2_ceil(v: int) -> float:
    """ceil(log2(fl32(v))) with log2 in float32 (-inf for 0)."""
    f = np.float32(v)
    if f <= 0:
        return -math.inf
    return float(np.ceil(np.float32(np.log2(np.float64(f)))))


def _kept_sums(sums: np.ndarray):
    """(K, d) of L1/L2: the sums' top 16 bits and the right shift d taking them there."""
    sums = np.clip(sums, 0, SUM_LIMIT)
    bits = _f32_log2_ceil(int(sums.max())) if sums.size else -math.inf
    d = int(bits - KEPT_BITS) if bits > KEPT_BITS else 0
    return np.clip(sums >> d, 0, (1 << KEPT_BITS) - 1), d


def _variance(layer, q: np.ndarray, axes, m, s):
    """The float32 steps, where they are exact (integers below 2^24)."""
    ax = tuple(axes)
    n = math.prod(q.shape[a] for a in axes)
    total = q.sum(axis=ax, keepdims=True)
    if total.size and np.abs(total).max() >= FLOAT32_EXACT:
        raise layer.error("VARIANCE: the float32 sum of q reaches 2^24, where the tool chain's float32 "
                          "order of summation decides its rounding", "method")
    mean = np.rint(total.astype(np.float32) / np.float32(n)).astype(np.int64)
    squares = (q - mean) ** 2
    bound = int(squares.max(initial=0)) * n
    if bound >= FLOAT32_EXACT:
        raise layer.error(f"VARIANCE: the float32 sum of squares could reach {bound} >= 2^24, where the "
                          f"tool chain's float32 order of summation decides its rounding", "method")
    return requantize(layer, squares.sum(axis=ax, keepdims=True), m, s, *top_bounds(layer))


def _prod(layer, a: np.ndarray, axes, signed: bool, m: int, s: int) -> np.ndarray:
    keep = [d for d in range(a.ndim) if d not in axes]
    out_shape = [1 if d in axes else a.shape[d] for d in range(a.ndim)]
    rows = a.transpose(keep + list(axes)).reshape(math.prod(a.shape[d] for d in keep), -1)
    lo, hi = (-(1 << (PROD_BITS - 1)), (1 << (PROD_BITS - 1)) - 1) if signed else (0, (1 << PROD_BITS) - 1)
    p = np.ones(rows.shape[0], np.int64)
    halvings = np.zeros_like(p)
    for j in range(rows.shape[1]):
        p = p * rows[:, j]
        while True:
            over = (p > hi) | (p < lo)
            if not over.any():
                break
            p = np.where(over, p >> 1, p)
            halvings += over
    return requantize(layer, p.reshape(out_shape), m, s - halvings.reshape(out_shape), *top_bounds(layer))


def reduce_int(layer, xs, infos):
    q, info = xs[0], infos[0]
    method = reduce_method(layer)
    axes = reduce_axes(layer, q.ndim)
    ax = tuple(axes)
    if method in ("MAX", "MIN"):
        return [finish(layer, (q.max if method == "MAX" else q.min)(axis=ax, keepdims=True), axes)]
    a = shifted(q, info, layer)
    if method in ("ALL", "ANY"):
        return [finish(layer, _logical(method, a != 0, axes).astype(np.int64), axes)]
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    if method in ("SUM", "MEAN"):
        out = requantize(layer, a.sum(axis=ax, keepdims=True), m, s, *top_bounds(layer))
    elif method in ("L1", "L2"):
        kept, d = _kept_sums((np.abs(a) if method == "L1" else a * a).sum(axis=ax, keepdims=True))
        if method == "L1":
            out = requantize(layer, kept, m, s - d, *top_bounds(layer))
        else:
            index = requantize(layer, kept, m, s - d, 0, 0, (1 << KEPT_BITS) - 1)
            table = layer.const("sqrt_lut")
            dtype = layer.const_types["sqrt_lut"]
            out = lut_lookup(layer, index, table, KEPT_BITS, dtype.qmin, dtype.qmax)
    elif method == "PROD":
        out = _prod(layer, a, axes, info.qmin + info.quant(layer)[1] < 0, m, s)
    else:
        out = _variance(layer, q, axes, m, s)
    return [finish(layer, out, axes)]


FLOAT = {"Reduce": reduce_float}
INT = {"Reduce": reduce_int}
