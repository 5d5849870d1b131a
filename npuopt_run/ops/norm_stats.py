"""LRN, Normalization, Moments, LogSoftmax (docs/integer-semantics.md, sections of the
same names). R(X, M, s) = requantize into the top; x = q + zp_in unless said otherwise.

* LRN: W = the sum of x^2 over channels c - size//2 .. c + (size-1)//2 (ACROSS_CHANNELS) or
  over the size x size window around the pixel (WITHIN_CHANNEL, zeros outside), a = R(W, scale_sum_value, shift_sum_value) into [0, 65535], g = lut[a] (16 index
  bits), out = R(x * g, scale_value, shift_value).
* Normalization L1: S = sum |x| (shifted right by -s when s < 0, s then 0), y =
  trunc(fl32(x * M) / fl32(S)) (0 where S = 0), out = R(y, 1, s). L2: S = sum x^2,
  o = S's bits above 31 made even, r = isqrt(S >> o), t = max(ceil(log2 fl32(r)) - 15, 0),
  r = min(r >> t, 2^15 - 1), y = clamp32(clamp16(clamp32(x * M) >> p) * r),
  out = R(y, 1, s + 31 - p - t + o / 2), p = reciprocal_shift_value.
* Moments (on q, not x): x = (q * input_scale_value) >> input_shift_value, m =
  round_half_even(fl64(sum x) / N) (the mean top), V = trunc(fl64(sum (x - m)^2) / N);
  the variance top R(V, var_scale_value, var_shift_value), for inputs wider than 8 bits
  R(R(h * M, 1, s - 16) + R(l * M, 1, s), 1, 0) with V = h * 2^16 + l (the inner ones
  into [0, 2^32 - 1], zero point 0).
* LogSoftmax (on q): y = lut_exp[q - max q + 2^b - 1], S = sum y; axis shorter than 8 and
  rows a multiple of 128: z = floor(((y << 11) + (S >> 1)) / max(S, 1)), p = R(z, M,
  s + 11) into [0, qmax - qmin] (zero point 0); else Softmax's divide-once form into the
  same range; out = lut_log[p] (b index bits). A float32 lut_exp (the tool chain's X2 form):
  out = round(fl32(d) * c0 - log(sum y) * c1) - zp in float32, (c0, c1) = quantize_scale.
"""
import numpy as np

from ..intmath import absmax, check_range, lut_lookup, requantize
from .fixed import inverse_sqrt
from .layernorm import FLOAT64_EXACT, axes_param
from .softmax import SMALL_AXIS, SMALL_ROWS, SUM_BITS, divide_once, softmax_axis
from .stage import int_param, int_value, top_bounds

LRN_METHODS = ("ACROSS_CHANNELS", "WITHIN_CHANNEL")
LRN_SUM_BITS = 16
NORM_ORDERS = {"L1": 1, "L2": 2}
PRODUCT_BITS = 16
RSQRT_BITS = 15
RSQRT_SHIFT = 31
HALF_BITS = 16
LOGSOFTMAX_SHIFT = 11
UINT32_MAX = (1 << 32) - 1


def _bounds(layer, i: int):
    """zp, qmin, qmax of top i."""
    return int_value(layer, "layer_top_zp", layer.top_zps[i]), *layer.top_range(i)


def _number(layer, key, default):
    v = layer.param(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise layer.error(f"{key} {v!r} must be a number", key)
    return float(v)


# ---- LRN ---------------------------------------------------------------------------
def _lrn_params(layer, ndim: int):
    method = str(layer.param("method", "ACROSS_CHANNELS")).upper()
    if method not in LRN_METHODS:
        raise layer.error(f"method {method} is not one of {', '.join(LRN_METHODS)}", "method")
    size = layer.param("size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise layer.error(f"size {size!r} must be a positive integer", "size")
    if ndim < 2 or method == "WITHIN_CHANNEL" and (ndim != 4 or size % 2 == 0):
        raise layer.error(f"{method} of size {size} on a {ndim}-D input is not supported", "method")
    return method, size


def _channel_sums(v: np.ndarray, size: int) -> np.ndarray:
    """Sums over the window c - size//2 .. c + (size-1)//2 of the last axis (zeros outside)."""
    c = v.shape[-1]
    pad = [(0, 0)] * (v.ndim - 1) + [(size // 2, (size - 1) // 2)]
    padded = np.pad(v, pad)
    return sum(padded[..., i:i + c] for i in range(size))


def _spatial_sums(v: np.ndarray, size: int) -> np.ndarray:
    """Sums over the size x size window around each pixel of NHWC v (zeros outside)."""
    p = (size - 1) // 2
    padded = np.pad(v, [(0, 0), (p, p), (p, p), (0, 0)])
    h, w = v.shape[1:3]
    return sum(padded[:, i:i + h, j:j + w] for i in range(size) for j in range(size))


def lrn_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    method, size = _lrn_params(layer, x.ndim)
    bias, alpha, beta = (_number(layer, k, d) for k, d in (("bias", 1.0), ("alpha", 1e-4), ("beta", 0.75)))
    sq = x * x
    if method == "ACROSS_CHANNELS":
        mean = _channel_sums(sq, size) / size
    else:
        mean = _spatial_sums(sq, size) / _spatial_sums(np.ones_like(sq), size)
    return [(x / np.power(bias + alpha * mean, beta)).astype(np.float32)]


def lrn_int(layer, xs, infos):
    method, size = _lrn_params(layer, xs[0].ndim)
    x = xs[0] + np.int64(infos[0].quant(layer)[1])
    window_sums = _channel_sums if method == "ACROSS_CHANNELS" else _spatial_sums
    a = requantize(layer, window_sums(x * x, size), int_param(layer, "scale_sum_value"),
                   int_param(layer, "shift_sum_value"), 0, 0, (1 << LRN_SUM_BITS) - 1)
    dtype = layer.const_types["lut"]
    g = lut_lookup(layer, a, layer.const("lut"), LRN_SUM_BITS, dtype.qmin, dtype.qmax)
    return [requantize(layer, x * g, int_param(layer, "scale_value"), int_param(layer, "shift_value"),
                       *top_bounds(layer))]


# ---- Normalization -------------------------------------------------------------------
def _order(layer) -> int:
    method = str(layer.param("method", "L2")).upper()
    if method not in NORM_ORDERS:
        raise layer.error(f"method {method} is not one of L1, L2", "method")
    return NORM_ORDERS[method]


def normalization_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    axes = axes_param(layer, x.ndim)
    p = _order(layer)
    eps = _number(layer, "epsilon", 1e-12) or float(np.finfo(np.float32).eps)
    norm = np.maximum((np.abs(x) ** p).sum(axis=axes, keepdims=True), eps)
    return [(x / norm ** (1.0 / p)).astype(np.float32)]


def _ceil_log2_f32(v: np.ndarray) -> np.ndarray:
    """ceil(log2(fl32(v))) with the logarithm rounded to float32."""
    return np.ceil(np.log2(v.astype(np.float32).astype(np.float64)).astype(np.float32)).astype(np.int64)


def _rsqrt_15(layer, s: np.ndarray):
    _, bits = np.frexp(np.maximum(s, 1).astype(np.float64))
    over = np.maximum(bits.astype(np.int64) - 31, 0)
    over = over + (over & 1)
    r = inverse_sqrt(layer, s >> over)
    t = np.maximum(_ceil_log2_f32(r) - RSQRT_BITS, 0)
    return np.clip(r >> t, 0, (1 << RSQRT_BITS) - 1), t - over // 2


def normalization_int(layer, xs, infos):
    axes = axes_param(layer, xs[0].ndim)
    x = xs[0] + np.int64(infos[0].quant(layer)[1])
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    n = int(np.prod([x.shape[a] for a in axes]))
    if _order(layer) == 1:
        check_range(layer, absmax(x) * max(n, m), "the row's sum")
        total = np.broadcast_to(np.abs(x).sum(axis=axes, keepdims=True), x.shape)
        if s < 0:
            total, s = total >> -s, 0
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.trunc((x * m).astype(np.float32) / total.astype(np.float32))
        y = np.where(total != 0, y, 0).astype(np.int64)
        return [requantize(layer, y, 1, s, *top_bounds(layer))]
    check_range(layer, absmax(x) ** 2 * n, "the row's sum of squares")
    y, e = times_rsqrt(layer, x, m, int_param(layer, "reciprocal_shift_value"), (x * x).sum(axis=axes, keepdims=True))
    return [requantize(layer, y, 1, s + e, *top_bounds(layer))]


def times_rsqrt(layer, x: np.ndarray, m, p: int, squares: np.ndarray):
    """(y, e): y = clamp32(clamp16(clamp32(x * M) >> p) * r), r ~ 2^(31 - t) / sqrt(S) of the
    sums of squares S (broadcasting against x), e = 31 - p - t (Normalization L2's product,
    EmbeddingLookupSparse SQRTN's too)."""
    r, t = _rsqrt_15(layer, squares)
    i32, i16 = (-(1 << 31), (1 << 31) - 1), (-(1 << (PRODUCT_BITS - 1)), (1 << (PRODUCT_BITS - 1)) - 1)
    y = np.clip(np.clip(x * m, *i32) >> p, *i16)
    return np.clip(y * r, *i32), RSQRT_SHIFT - p - t


# ---- Moments -----------------------------------------------------------------------
def _keepdims(layer) -> bool:
    v = layer.param("keepdims", True)
    if v not in (True, False, 0, 1):
        raise layer.error(f"keepdims {v!r} must be true or false", "keepdims")
    return bool(v)


def _two_tops(layer):
    if len(layer.tops) != 2:
        raise layer.error(f"{len(layer.tops)} tops; Moments has 2 (mean, variance)")


def moments_float(layer, xs, infos):
    _two_tops(layer)
    x = xs[0].astype(np.float64)
    axes = axes_param(layer, x.ndim)
    keep = _keepdims(layer)
    return [x.mean(axis=axes, keepdims=keep).astype(np.float32), x.var(axis=axes, keepdims=keep).astype(np.float32)]


def moments_int(layer, xs, infos):
    _two_tops(layer)
    axes = axes_param(layer, xs[0].ndim)
    x = (xs[0] * int_param(layer, "input_scale_value")) >> int_param(layer, "input_shift_value")
    n = int(np.prod([x.shape[a] for a in axes]))
    check_range(layer, absmax(x) * n, "the row's sum")
    mean = np.rint(x.sum(axis=axes, keepdims=True).astype(np.float64) / n).astype(np.int64)
    squares = ((x - mean) ** 2).sum(axis=axes, keepdims=True)
    if squares.size and squares.max() >= FLOAT64_EXACT:
        raise layer.error("the sum of squared deviations reaches 2^53 (a float64 step would round)")
    v = np.trunc(squares.astype(np.float64) / n).astype(np.int64)
    m, s = int_param(layer, "var_scale_value"), int_param(layer, "var_shift_value")
    if infos[0].dtype.bits <= 8:
        var = requantize(layer, v, m, s, *_bounds(layer, 1))
    else:
        high = v >> HALF_BITS
        low = v - (high << HALF_BITS)
        var = requantize(layer, requantize(layer, high * m, 1, s - HALF_BITS, 0, 0, UINT32_MAX)
                         + requantize(layer, low * m, 1, s, 0, 0, UINT32_MAX), 1, 0, *_bounds(layer, 1))
    if not _keepdims(layer):
        mean, var = mean.squeeze(axis=axes), var.squeeze(axis=axes)
    return [mean, var]


# ---- LogSoftmax --------------------------------------------------------------------
def logsoftmax_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    axis = softmax_axis(layer, x.ndim)
    d = x - x.max(axis=axis, keepdims=True)
    return [(d - np.log(np.exp(d).sum(axis=axis, keepdims=True))).astype(np.float32)]


def _logsoftmax_float_table(layer, q, axis: int, b: int):
    """The X2 form: y = lut_exp[d + 2^b - 1] looked up in float32 (t[i] + (t[i+1] - t[i]) * r
    / 2^c), out = clamp(round_half_even(fl32(d) * c0 - log(sum y) * c1) - zp), in float32
    with (c0, c1) = quantize_scale; the float32 sum in NumPy's order."""
    c = layer.param("quantize_scale")
    if not isinstance(c, list) or len(c) != 2 or not all(isinstance(v, (int, float)) for v in c):
        raise layer.error(f"quantize_scale {c!r} must be two numbers", "quantize_scale")
    table = layer.const("lut_exp").reshape(-1).astype(np.float32)
    shift = max(0, b - (table.size.bit_length() - 1))
    table = np.append(table, table[-1])
    d = q - q.max(axis=axis, keepdims=True)
    index = d + ((1 << b) - 1)
    i = index >> shift
    step = (table[i + 1] - table[i]) * (index - (i << shift)).astype(np.float32)
    y = table[i] + step / np.float32(1 << shift)
    log_sum = np.log(y.sum(axis=axis, keepdims=True, dtype=np.float32))
    v = d.astype(np.float32) * np.float32(c[0]) - log_sum * np.float32(c[1])
    zp, lo, hi = top_bounds(layer)
    return np.clip(np.rint(v).astype(np.int64) - zp, lo, hi)


def logsoftmax_int(layer, xs, infos):
    q = xs[0]
    axis = softmax_axis(layer, q.ndim)
    exp_type = layer.const_types["lut_exp"]
    if not exp_type.is_int:
        return [_logsoftmax_float_table(layer, q, axis, infos[0].dtype.bits)]
    log_type = layer.const_types["lut_log"]
    b = infos[0].dtype.bits
    y = lut_lookup(layer, q - q.max(axis=axis, keepdims=True) + ((1 << b) - 1), layer.const("lut_exp"), b,
                   exp_type.qmin, exp_type.qmax)
    total = y.sum(axis=axis, keepdims=True)
    denominator = np.maximum(total, 1)
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    _, lo, hi = top_bounds(layer)
    rows = q.size // q.shape[axis] if q.shape[axis] else 0
    if q.shape[axis] < SMALL_AXIS and rows % SMALL_ROWS == 0:
        z = ((y << LOGSOFTMAX_SHIFT) + (total >> 1)) // denominator
        p = requantize(layer, z, m, s + LOGSOFTMAX_SHIFT, 0, 0, hi - lo)
    else:
        c = SUM_BITS - 1 if int(layer.const("lut_exp").max(initial=0)) == 1 else SUM_BITS
        p = divide_once(layer, y, denominator, c, m, s, 0, 0, hi - lo)
    return [lut_lookup(layer, p, layer.const("lut_log"), b, log_type.qmin, log_type.qmax)]


FLOAT = {"LRN": lrn_float, "Normalization": normalization_float, "Moments": moments_float,
         "LogSoftmax": logsoftmax_float}
INT = {"LRN": lrn_int, "Normalization": normalization_int, "Moments": moments_int, "LogSoftmax": logsoftmax_int}
