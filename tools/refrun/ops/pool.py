"""Pooling (MAX/AVG, pads, ceil_mode) and Reduce."""
import numpy as np

from .geometry import window_counts, window_params, windows
from .stage import same_quantization, scaled_mean, shifted


def pool_method(layer):
    method = str(layer.param("method")).upper()
    if method not in ("MAX", "AVG"):
        raise layer.error(f"unsupported pooling method '{method}' (MAX, AVG)", "method")
    return method


def pool_float(layer, xs, infos):
    x = xs[0]
    w = window_params(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if pool_method(layer) == "MAX":
        return [windows(x, w, np.float32(-np.inf), ceil_mode).max(axis=(3, 4))]
    sums = windows(x, w, np.float32(0), ceil_mode).sum(axis=(3, 4), dtype=np.float32)
    counts = window_counts(x.shape[1], x.shape[2], w, ceil_mode, bool(layer.param("count_include_pad", False)))
    return [(sums / counts[None, :, :, None].astype(np.float32)).astype(np.float32)]


def pool_int(layer, xs, infos):
    """MAX: the largest q of the window, pads and ceil overhang never win, no rescale.
    AVG: S = sum of A (pads add 0), n = counted elements, with M, s = scale_value, shift_value:
    out = clamp(round_div(S * M * 2^max(0,-s), n * 2^max(0,s)) - zp_out, lo, hi)."""
    x = xs[0]
    w = window_params(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if pool_method(layer) == "MAX":
        same_quantization(layer, infos[0])
        return [windows(x, w, np.iinfo(np.int64).min, ceil_mode).max(axis=(3, 4))]
    if w["dilation"] != (1, 1):
        raise layer.error(f"AVG pooling with dilation {list(w['dilation'])} is not supported", "dilation_x")
    a = shifted(x, infos[0], layer)
    sums = windows(a, w, np.int64(0), ceil_mode).sum(axis=(3, 4))
    counts = window_counts(x.shape[1], x.shape[2], w, ceil_mode, bool(layer.param("count_include_pad", False)))
    return [scaled_mean(layer, sums, counts[None, :, :, None])]


def reduce_axes(layer, ndim):
    axes = layer.param("axis")
    axes = [axes] if isinstance(axes, int) else list(axes)
    if not axes or not all(isinstance(a, int) and -ndim <= a < ndim for a in axes):
        raise layer.error(f"axis {layer.param('axis')} does not name axes of a {ndim}-D tensor", "axis")
    return tuple(sorted(a % ndim for a in axes))


_FLOAT_REDUCE = {"MEAN": np.mean, "SUM": np.sum, "MAX": np.max, "MIN": np.min}


def reduce_method(layer, table):
    method = str(layer.param("method")).upper()
    if method not in table:
        raise layer.error(f"unsupported Reduce method '{method}' ({', '.join(table)})", "method")
    return table[method]


def reduce_float(layer, xs, infos):
    x = xs[0]
    fn = reduce_method(layer, _FLOAT_REDUCE)
    out = fn(x, axis=reduce_axes(layer, x.ndim), keepdims=bool(layer.param("keepdims", True)))
    return [np.asarray(out, np.float32)]


def reduce_int(layer, xs, infos):
    """MAX/MIN: of q, no rescale. MEAN/SUM: S = sum of A, n = the reduced count (MEAN)
    or 1 (SUM), then the AVG pooling formula."""
    x = xs[0]
    axes = reduce_axes(layer, x.ndim)
    keepdims = bool(layer.param("keepdims", True))
    method = str(layer.param("method")).upper()
    reduce_method(layer, _FLOAT_REDUCE)
    if method in ("MAX", "MIN"):
        same_quantization(layer, infos[0])
        return [(np.max if method == "MAX" else np.min)(x, axis=axes, keepdims=keepdims)]
    sums = shifted(x, infos[0], layer).sum(axis=axes, keepdims=keepdims)
    count = int(np.prod([x.shape[a] for a in axes])) if method == "MEAN" else 1
    return [scaled_mean(layer, sums, count)]


FLOAT = {"Pooling": pool_float, "Reduce": reduce_float}
INT = {"Pooling": pool_int, "Reduce": reduce_int}
