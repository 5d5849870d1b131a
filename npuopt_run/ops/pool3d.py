"""Pooling3D: MAX, AVG over NDHWC windows (kernel/stride/dilation_z/y/x, pad_z/y/x_begin/end,
ceil_mode with the overhang as padding, count_include_pad default true).

Pooling3D float: MAX; AVG = S / n, S the window's sum (pads add 0), n = kz * ky * kx with
count_include_pad, else the taps inside the input (at least 1).
Pooling3D integer: MAX of q (pads hold the input's qmin). AVG sums A = q + zp_in with
count_include_pad (zp = zp_out), else A = q (zp = 0), pads A = 0:
* dilated windows: S clamped to [-2^31, 2^31], requantize(S, M, s, zp) with M, s of
  fl32(1 / n) (8-bit multipliers, intmath.scale_approximation_f32);
* otherwise the tool chain's float32 steps: S = fl32(S) clamped; without
  count_include_pad S = fl32(fl32(S * K) / fl32(fl32(c / K) * K)) (K the kernel's taps, c
  those inside the input); T = clamp(round_half_even(fl32(S * M1) * 2^-s1), +-2^31) with
  M1, s1 of 1 / (ky * kx); out = clamp(round_half_even(fl32(T * M2) * 2^-s2) - zp) with
  M2, s2 of 1 / kz."""
import numpy as np

from ..intmath import requantize, scale_approximation_f32
from .conv import nd_windows, window
from .geometry import out_size
from .stage import shifted, top_bounds

POOL3D_METHODS = ("MAX", "AVG")
SUM_BOUND = 1 << 31
MULTIPLIER_BITS = 8


def _method(layer, methods):
    method = str(layer.param("method")).upper()
    if method not in methods:
        raise layer.error(f"unsupported method '{method}' ({', '.join(methods)})", "method")
    return method


# ---- Pooling3D ---------------------------------------------------------------------------
def _geometry(layer, x):
    """The window with the ceil-mode overhang added to the end pads, and the output sizes."""
    if x.ndim != 5:
        raise layer.error(f"takes an NDHWC input, got {x.ndim}-D")
    win = window(layer, 3)
    ceil_mode = bool(layer.param("ceil_mode", False))
    pads, out = [], []
    for size, k, s, d, (begin, end) in zip(x.shape[1:4], win["kernel"], win["stride"], win["dilation"],
                                            win["pads"]):
        o = out_size(size, k, s, d, begin, end, ceil_mode)
        if o < 1:
            raise layer.error(f"a kernel of {k} (dilation {d}) does not fit the padded axis {begin} + {size} + {end}")
        pads.append((begin, end + max(0, (o - 1) * s + d * (k - 1) + 1 - (size + begin + end))))
        out.append(o)
    win["pads"] = pads
    return win, out


def _taps(x, win, out, fill):
    """[N, OD, OH, OW, taps, C]."""
    v = nd_windows(x, win, fill)[:, :out[0], :out[1], :out[2]]
    return v.reshape(v.shape[:4] + (-1, v.shape[-1]))


def _inside(x, win, out):
    """[1, OD, OH, OW, 1] taps of each window inside the input."""
    return _taps(np.ones((1,) + x.shape[1:4] + (1,), np.int64), win, out, 0).sum(axis=4)


def pool3d_float(layer, xs, infos):
    x = xs[0]
    method = _method(layer, POOL3D_METHODS)
    win, out = _geometry(layer, x)
    if method == "MAX":
        return [_taps(x, win, out, np.float32(-np.inf)).max(axis=4)]
    sums = _taps(x.astype(np.float64), win, out, 0.0).sum(axis=4)
    if bool(layer.param("count_include_pad", True)):
        n = int(np.prod(win["kernel"]))
    else:
        n = np.maximum(_inside(x, win, out), 1)
    return [(sums / n).astype(np.float32)]


def _stage_f32(v, area):
    """round_half_even(fl32(v * M) * 2^-s), M, s of fl32(1 / area), v float32."""
    m, s = scale_approximation_f32(np.float32(1.0) / np.float32(area), MULTIPLIER_BITS)
    return np.rint(v * np.float32(m) * np.float32(2.0 ** -int(s)))


def pool3d_int(layer, xs, infos):
    x, info = xs[0], infos[0]
    method = _method(layer, POOL3D_METHODS)
    win, out = _geometry(layer, x)
    if method == "MAX":
        return [_taps(x, win, out, np.int64(info.qmin)).max(axis=4)]
    zp_out, lo, hi = top_bounds(layer)
    include_pad = bool(layer.param("count_include_pad", True))
    a, zp = (shifted(x, info, layer), zp_out) if include_pad else (x, 0)
    sums = _taps(a, win, out, np.int64(0)).sum(axis=4)
    kernel = int(np.prod(win["kernel"]))
    counts = None if include_pad else _inside(x, win, out)
    if any(d > 1 for d in win["dilation"]):
        sums = np.clip(sums, -SUM_BOUND, SUM_BOUND)
        ratio = np.float32(1.0 / kernel) if include_pad else \
            np.float32(1.0) / np.maximum(counts, 1).astype(np.float32)
        m, s = scale_approximation_f32(ratio, MULTIPLIER_BITS)
        return [requantize(layer, sums, m, s, zp, lo, hi)]
    v = np.clip(sums.astype(np.float32), np.float32(-SUM_BOUND), np.float32(SUM_BOUND))
    if counts is not None:
        if counts.min(initial=1) < 1:
            raise layer.error("an AVG window lies entirely in the padding (count_include_pad=false)",
                              "count_include_pad")
        k32 = np.float32(kernel)
        v = (v * k32) / ((counts.astype(np.float32) / k32) * k32)
    v = np.clip(_stage_f32(v, win["kernel"][1] * win["kernel"][2]), np.float32(-SUM_BOUND), np.float32(SUM_BOUND))
    v = _stage_f32(v, win["kernel"][0]).astype(np.int64)
    return [np.clip(v - zp, lo, hi)]


FLOAT = {"Pooling3D": pool3d_float}
INT = {"Pooling3D": pool3d_int}
