"""Pooling: MAX, AVG, L1, L2 over NHWC windows with dilation, pads and ceil_mode (the
overhang of the last windows is padding too).

Float: MAX; AVG = S / n, S the window's sum (pads add 0), n = kernel_y * kernel_x with
count_include_pad (the default; the ceil-mode overhang counted too), else the window's
taps inside the input (at least 1); L1 = sum |x|; L2 = sqrt(sum x^2).
Integer, A = q + zp (pads hold A = 0): MAX of q (pads hold the input's qmin); AVG:
S = sum A clamped to [-2^31, 2^31], requantize(S, M, s) with M, s of fl32(fl32(s_out /
s_in) / n) per window, derived in float32 (intmath.scale_approximation_f32, 8-bit
multipliers); L1: S = sum |A| clamped to [0, 2^32 - 1], requantize(S, scale_value,
shift_value); L2: S = sum A^2 clamped likewise, P = clamp(round_half_even(S * M * 2^-s),
0, 65535), out = sqrt_lut looked up at P (16 index bits)."""
import numpy as np

from ..intmath import lut_lookup, requantize, scale_approximation_f32
from .geometry import window_counts, window_params, windows
from .stage import int_param, shifted, top_bounds

METHODS = ("MAX", "AVG", "L1", "L2")
SUM_BOUND = 1 << 31          # AVG window sums are clamped to [-2^31, 2^31]
SUM_LIMIT = (1 << 32) - 1    # L1/L2 sums to [0, 2^32 - 1]
AVG_MULTIPLIER_BITS = 8
INDEX_BITS = 16


def pool_method(layer):
    method = str(layer.param("method")).upper()
    if method not in METHODS:
        raise layer.error(f"unsupported pooling method '{method}' ({', '.join(METHODS)})", "method")
    return method


def checked_window(layer):
    w = window_params(layer)
    names = {"kernel": ("kernel_y", "kernel_x"), "stride": ("stride_y", "stride_x"),
             "dilation": ("dilation_y", "dilation_x"), "pads": ("pad_top", "pad_bottom", "pad_left", "pad_right")}
    for key, keys in names.items():
        for name, v in zip(keys, w[key]):
            if v < (0 if key == "pads" else 1):
                raise layer.error(f"{name} {v} out of range", name)
    return w


def avg_divisors(layer, x, w, ceil_mode) -> np.ndarray:
    """[OH, OW] n of the AVG description."""
    if bool(layer.param("count_include_pad", True)):
        counts = window_counts(x.shape[1], x.shape[2], w, ceil_mode, True)
        return np.full(counts.shape, w["kernel"][0] * w["kernel"][1], np.int64)
    return window_counts(x.shape[1], x.shape[2], w, ceil_mode, False)


def pool_float(layer, xs, infos):
    x = xs[0]
    method = pool_method(layer)
    w = checked_window(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if method == "MAX":
        return [windows(x, w, np.float32(-np.inf), ceil_mode).max(axis=(3, 4))]
    v = windows(x.astype(np.float64), w, 0.0, ceil_mode)
    if method == "AVG":
        counts = np.maximum(avg_divisors(layer, x, w, ceil_mode), 1)
        return [(v.sum(axis=(3, 4)) / counts[None, :, :, None]).astype(np.float32)]
    if method == "L1":
        return [np.abs(v).sum(axis=(3, 4)).astype(np.float32)]
    return [np.sqrt((v * v).sum(axis=(3, 4))).astype(np.float32)]


def pool_int(layer, xs, infos):
    x, info = xs[0], infos[0]
    method = pool_method(layer)
    w = checked_window(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    if method == "MAX":
        return [windows(x, w, np.int64(info.qmin), ceil_mode).max(axis=(3, 4))]
    v = windows(shifted(x, info, layer), w, np.int64(0), ceil_mode)
    if method == "AVG":
        sums = np.clip(v.sum(axis=(3, 4)), -SUM_BOUND, SUM_BOUND)
        counts = avg_divisors(layer, x, w, ceil_mode)
        if w["dilation"] == (1, 1) and counts.size and counts.min() < 1:
            raise layer.error("an AVG window lies entirely in the padding (count_include_pad=false)",
                              "count_include_pad")
        ratio = np.float32(layer.top_scales[0]) / np.float32(info.quant(layer)[0]) / \
            np.maximum(counts, 1).astype(np.float32)
        m, s = scale_approximation_f32(ratio, AVG_MULTIPLIER_BITS)
        return [requantize(layer, sums, m[None, :, :, None], s[None, :, :, None], *top_bounds(layer))]
    sums = np.clip((np.abs(v) if method == "L1" else v * v).sum(axis=(3, 4)), 0, SUM_LIMIT)
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    if method == "L1":
        return [requantize(layer, sums, m, s, *top_bounds(layer))]
    index = requantize(layer, sums, m, s, 0, 0, (1 << INDEX_BITS) - 1)
    dtype = layer.const_types.get("sqrt_lut")
    if dtype is None or not dtype.is_int:
        raise layer.error("integer L2 pooling needs an integer constant 'sqrt_lut'", "method")
    return [lut_lookup(layer, index, layer.const("sqrt_lut"), INDEX_BITS, dtype.qmin, dtype.qmax)]


# ---- AdaptivePool: window i of an axis of length L, O outputs: [floor(i L / O), ceil((i + 1) L / O)) --
ADAPTIVE_METHODS = ("MAX", "AVG")


def adaptive_windows(layer, x):
    """[N, OH, OW] lists of the windows' [N, h, w, C] blocks of the [N]HWC input (as 4-D)."""
    size = layer.param("output_size")
    if not isinstance(size, list) or len(size) != 2 or any(not isinstance(v, int) or v < 1 for v in size):
        raise layer.error(f"output_size must be two positive integers, got {size!r}", "output_size")
    if x.ndim not in (3, 4):
        raise layer.error(f"takes an NHWC or HWC input, got {x.ndim}-D")
    x4 = x if x.ndim == 4 else x[None]
    edges = [[(i * n // o, -(-(i + 1) * n // o)) for i in range(o)] for n, o in zip(x4.shape[1:3], size)]
    return [[x4[:, h0:h1, w0:w1] for w0, w1 in edges[1]] for h0, h1 in edges[0]]


def adaptive_method(layer):
    method = str(layer.param("method")).upper()
    if method not in ADAPTIVE_METHODS:
        raise layer.error(f"unsupported method '{method}' ({', '.join(ADAPTIVE_METHODS)})", "method")
    return method


def adaptive_output(x, rows):
    """[N, OH, OW, C] (or [OH, OW, C] for an HWC input) of per-window [N, C] results."""
    y = np.stack([np.stack(r, axis=1) for r in rows], axis=1)
    return y if x.ndim == 4 else y[0]


def adaptive_float(layer, xs, infos):
    method = adaptive_method(layer)
    blocks = adaptive_windows(layer, xs[0])
    if method == "MAX":
        rows = [[b.max(axis=(1, 2)) for b in r] for r in blocks]
    else:
        rows = [[b.astype(np.float64).mean(axis=(1, 2)).astype(np.float32) for b in r] for r in blocks]
    return [adaptive_output(xs[0], rows)]


def adaptive_int(layer, xs, infos):
    """MAX of q; AVG: requantize(sum of q, M, s, 0) with M, s of fl32(1 / area), 8 bits."""
    method = adaptive_method(layer)
    blocks = adaptive_windows(layer, xs[0])
    if method == "MAX":
        return [adaptive_output(xs[0], [[b.max(axis=(1, 2)) for b in r] for r in blocks])]
    _, lo, hi = top_bounds(layer)
    rows = []
    for r in blocks:
        row = []
        for b in r:
            m, s = scale_approximation_f32(np.float32(1.0) / np.float32(b.shape[1] * b.shape[2]), AVG_MULTIPLIER_BITS)
            row.append(requantize(layer, b.sum(axis=(1, 2)), m, s, 0, lo, hi))
        rows.append(row)
    return [adaptive_output(xs[0], rows)]


FLOAT = {"Pooling": pool_float, "AdaptivePool": adaptive_float}
INT = {"Pooling": pool_int, "AdaptivePool": adaptive_int}
