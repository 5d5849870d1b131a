"""Pooling (MAX/AVG, pads, ceil_mode); the float forward of Reduce (its integer forward
is npuopt's former one, ops/former.py)."""
import numpy as np

from ..intmath import requantize, scale_approximation_f32
from .geometry import window_counts, window_params, windows
from .stage import same_quantization, shifted, top_bounds


def pool_method(layer):
    method = str(layer.param("method")).upper()
    if method not in ("MAX", "AVG"):
        raise layer.error(f"unsupported pooling method '{method}' (MAX, AVG)", "method")
    return method


def count_include_pad(layer) -> bool:
    return bool(layer.param("count_include_pad", True))


def pool_float(layer, xs, infos):
    x = xs[0]
    w = window_params(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if pool_method(layer) == "MAX":
        return [windows(x, w, np.float32(-np.inf), ceil_mode).max(axis=(3, 4))]
    sums = windows(x, w, np.float32(0), ceil_mode).sum(axis=(3, 4), dtype=np.float32)
    counts = window_counts(x.shape[1], x.shape[2], w, ceil_mode, count_include_pad(layer))
    return [(sums / counts[None, :, :, None].astype(np.float32)).astype(np.float32)]


SUM_BOUND = 1 << 31          # window sums are clamped to [-2^31, 2^31]
AVG_MULTIPLIER_BITS = 8


def avg_divisors(layer, height: int, width: int, out_h: int, out_w: int, w) -> np.ndarray:
    """[OH, OW] element counts the tool chain divides each window's sum by: kernel_y * kernel_x
    with count_include_pad (the default), else the window clipped to the unpadded input."""
    (kh, kw), (sy, sx) = w["kernel"], w["stride"]
    if count_include_pad(layer):
        return np.full((out_h, out_w), kh * kw, np.int64)
    top, _, left, _ = w["pads"]
    y0 = np.arange(out_h).reshape(-1, 1) * sy - top
    x0 = np.arange(out_w).reshape(1, -1) * sx - left
    rows = np.minimum(y0 + kh, height) - np.maximum(y0, 0)
    cols = np.minimum(x0 + kw, width) - np.maximum(x0, 0)
    return rows * cols


def pool_int(layer, xs, infos):
    """MAX: the largest q of the window; pads hold the input's qmin, the ceil-mode overhang
    never wins; no rescale. AVG: S = sum of A = q + zp over the window (pads add 0),
    clamped to [-2^31, 2^31]; the multiplier and shift of fl32(fl32(s_out / s_in) / n) per
    window, derived in float32 at run time from layer_top_scale (intmath.scale_approximation_f32,
    8-bit multipliers); out = requantize(S, M, shift)."""
    x, info = xs[0], infos[0]
    w = window_params(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if pool_method(layer) == "MAX":
        same_quantization(layer, info)
        return [windows(x, w, np.int64(info.qmin), ceil_mode).max(axis=(3, 4))]
    if w["dilation"] != (1, 1):
        raise layer.error(f"AVG pooling with dilation {list(w['dilation'])} is not supported", "dilation_x")
    sums = windows(shifted(x, info, layer), w, np.int64(0), ceil_mode).sum(axis=(3, 4))
    sums = np.clip(sums, -SUM_BOUND, SUM_BOUND)
    counts = avg_divisors(layer, x.shape[1], x.shape[2], sums.shape[1], sums.shape[2], w)
    if counts.size and counts.min() < 1:
        raise layer.error("an AVG window lies entirely in the padding (count_include_pad=false)",
                          "count_include_pad")
    ratio = np.float32(layer.top_scales[0]) / np.float32(info.quant(layer)[0]) / counts.astype(np.float32)
    m, s = scale_approximation_f32(ratio, AVG_MULTIPLIER_BITS)
    return [requantize(layer, sums, m[None, :, :, None], s[None, :, :, None], *top_bounds(layer))]


def reduce_axes(layer, ndim):
    axes = layer.param("axis")
    axes = [axes] if isinstance(axes, int) else list(axes)
    if not axes or not all(isinstance(a, int) and -ndim <= a < ndim for a in axes):
        raise layer.error(f"axis {layer.param('axis')} does not name axes of a {ndim}-D tensor", "axis")
    return tuple(sorted(a % ndim for a in axes))


FLOAT_REDUCE = {"MEAN": np.mean, "SUM": np.sum, "MAX": np.max, "MIN": np.min}


def reduce_method(layer, table):
    method = str(layer.param("method")).upper()
    if method not in table:
        raise layer.error(f"unsupported Reduce method '{method}' ({', '.join(table)})", "method")
    return table[method]


def reduce_float(layer, xs, infos):
    x = xs[0]
    fn = reduce_method(layer, FLOAT_REDUCE)
    out = fn(x, axis=reduce_axes(layer, x.ndim), keepdims=bool(layer.param("keepdims", True)))
    return [np.asarray(out, np.float32)]


FLOAT = {"Pooling": pool_float, "Reduce": reduce_float}
INT = {"Pooling": pool_int}
