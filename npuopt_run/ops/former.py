"""npuopt's former integer forms of Reduce, Resize, Softmax and LayerNorm (round half
up, `activation_qmin/qmax` clamps, npuopt's own fields), kept until these four layers
are ported to the tool chain's format.

They run only on IRs in npuopt's former format. A layer in the tool chain's format
(it carries `layer_top_range`) is refused with a one-line error instead of being
computed with the former arithmetic.
"""
import math

import numpy as np

from ..intmath import absmax, check_range
from .elementwise import normalized_axes
from .pool import FLOAT_REDUCE, reduce_axes, reduce_method
from .stage import int_param, int_value, same_quantization, shifted, weights_with_zp

NOT_PORTED = ("Reduce", "Resize", "Softmax", "LayerNorm")


def former_format_only(forward):
    """The forward, refusing layers in the tool chain's format."""
    def checked(layer, xs, infos):
        if layer.top_ranges is not None:
            raise layer.error(f"the integer {layer.type} of the tool chain's format (layer_top_range, round half "
                              f"to even) is not ported to npuopt-run yet", "layer_top_range")
        return forward(layer, xs, infos)
    checked.__doc__ = forward.__doc__
    return checked


# ---- the former primitives ---------------------------------------------------------
def rrs(v: np.ndarray, s) -> np.ndarray:
    """Rounding right shift: s >= 1: floor((v + 2^(s-1)) / 2^s); s = 0: v; s < 0: v * 2^-s.
    `s` is an int or an array broadcasting against v (per channel)."""
    v = np.asarray(v, np.int64)
    s = np.asarray(s, np.int64)
    right = np.maximum(s, 0)
    half = np.where(right > 0, np.left_shift(np.int64(1), np.maximum(right - 1, 0)), 0)
    return np.where(s > 0, np.right_shift(v + half, right), np.left_shift(v, np.maximum(-s, 0)))


def rrs_bound(v_bound: int, s) -> int:
    """A bound on |intermediates| of rrs for |v| <= v_bound."""
    s = np.asarray(s, np.int64)
    return v_bound * (1 << int(max(0, -s.min(initial=0)))) + (1 << int(max(0, s.max(initial=0))))


def round_div(a: np.ndarray, b) -> np.ndarray:
    """floor((2a + b) / (2b)) for b > 0, i.e. floor(a/b + 1/2)."""
    b = np.asarray(b, np.int64)
    return np.floor_divide(2 * np.asarray(a, np.int64) + b, 2 * b)


def bounds(layer, dtype):
    """Saturation bounds: the dtype's range, intersected with activation_qmin/qmax when present."""
    lo, hi = dtype.qmin, dtype.qmax
    if "activation_qmin" in layer.params:
        lo = max(lo, int(layer.param("activation_qmin")))
    if "activation_qmax" in layer.params:
        hi = min(hi, int(layer.param("activation_qmax")))
    return lo, hi


def saturate(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(x, lo, hi).astype(np.int64)


def lut_lookup(layer, q: np.ndarray, lut: np.ndarray, qmin_in: int, bits: int) -> np.ndarray:
    """The table lookup with linear interpolation (Activation LUTs, Softmax):
    d = q - qmin_in; k = bits - log2(L); k = 0: lut[d]; k > 0: i = d >> k,
    r = d & (2^k - 1), j = clamp(i + 1, 1, L - 1), lut[i] + RRS((lut[j] - lut[j-1]) * r, k)."""
    lut = lut.reshape(-1).astype(np.int64)
    n = lut.size
    lb = n.bit_length() - 1
    if n < 2 or n != 1 << lb:
        raise layer.error(f"lut has {n} entries; it must have 2^n >= 2", "lut_offset")
    k = bits - lb
    if k < 0:
        raise layer.error(f"lut of {n} entries is longer than the {bits}-bit input range", "lut_offset")
    d = np.asarray(q, np.int64) - qmin_in
    if d.size and (d.min() < 0 or d.max() >= 1 << bits):
        raise layer.error(f"lut index {d.min()}..{d.max()} outside 0..{(1 << bits) - 1}")
    if k == 0:
        return lut[d]
    i = d >> k
    r = d & ((1 << k) - 1)
    j = np.clip(i + 1, 1, n - 1)
    check_range(layer, rrs_bound(absmax(np.diff(lut)) * ((1 << k) - 1), k), "a lut interpolation")
    return lut[i] + rrs((lut[j] - lut[j - 1]) * r, k)

def multiplier(layer, channels: int, prefix: str = ""):
    """(M, s): per channel from constants `scale`/`shift`, else the params
    `scale_value`/`shift_value`. Per-channel vectors run along the last axis."""
    if layer.has_const(prefix + "scale") or layer.has_const(prefix + "shift"):
        m, s = layer.const(prefix + "scale").reshape(-1), layer.const(prefix + "shift").reshape(-1)
        if m.size != channels or s.size != channels:
            raise layer.error(f"per-channel {prefix}scale/{prefix}shift have {m.size}/{s.size} entries "
                              f"for {channels} channels", prefix + "scale_offset")
        return m.astype(np.int64), s.astype(np.int64)
    return int_param(layer, prefix + "scale_value"), int_param(layer, prefix + "shift_value")


def output_stage(layer, z: np.ndarray, m, s) -> np.ndarray:
    """The former output stage: clamp(RRS(z * M, s) - zp_out, lo, hi), per-channel
    numbers along the last axis."""
    check_range(layer, rrs_bound(absmax(z) * absmax(m), s), "the rescale z*M")
    return finish(layer, rrs(z * m, s))


def finish(layer, y: np.ndarray) -> np.ndarray:
    """clamp(y - zp_out, lo, hi) with the top's zero point and saturation bounds."""
    zp_out = int_value(layer, "layer_top_zp", layer.top_zps[0])
    return saturate(y - np.int64(zp_out), *bounds(layer, layer.top_types[0]))


def scaled_mean(layer, sums: np.ndarray, counts) -> np.ndarray:
    """AVG pooling and Reduce MEAN/SUM, with M, s = scale_value, shift_value:
    clamp(round_div(S * M * 2^max(0,-s), n * 2^max(0,s)) - zp_out, lo, hi)."""
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    counts = np.asarray(counts, np.int64)
    check_range(layer, 2 * absmax(sums) * abs(m) * (1 << max(0, -s)) + 2 * absmax(counts) * (1 << max(0, s)),
                "the mean's rescale")
    return finish(layer, round_div(sums * np.int64(m) * np.int64(1 << max(0, -s)),
                                   counts * np.int64(1 << max(0, s))))


# ---- the former forwards -------------------------------------------------------------
def reduce_int(layer, xs, infos):
    """MAX/MIN: of q, no rescale. MEAN/SUM: S = sum of A, n = the reduced count (MEAN)
    or 1 (SUM), then the AVG pooling formula."""
    x = xs[0]
    axes = reduce_axes(layer, x.ndim)
    keepdims = bool(layer.param("keepdims", True))
    method = str(layer.param("method")).upper()
    reduce_method(layer, FLOAT_REDUCE)
    if method in ("MAX", "MIN"):
        same_quantization(layer, infos[0])
        return [(np.max if method == "MAX" else np.min)(x, axis=axes, keepdims=keepdims)]
    sums = shifted(x, infos[0], layer).sum(axis=axes, keepdims=keepdims)
    count = int(np.prod([x.shape[a] for a in axes])) if method == "MEAN" else 1
    return [scaled_mean(layer, sums, count)]


def _nearest_index(d: np.ndarray, in_size: int, out_size: int, mode: str) -> np.ndarray:
    if mode == "asymmetric":
        index = d * in_size // out_size
    elif mode == "half_pixel":
        index = (2 * d + 1) * in_size // (2 * out_size)
    else:
        index = round_div(d * (in_size - 1), out_size - 1) if out_size > 1 else np.zeros_like(d)
    return np.clip(index, 0, in_size - 1)


def _bilinear_taps(d: np.ndarray, in_size: int, out_size: int, mode: str, frac_bits: int):
    """(i0, i1, f): the source coordinate times 2^F, P, split into taps and fraction."""
    one = np.int64(1) << frac_bits
    if mode == "asymmetric":
        p = round_div(d * in_size * one, out_size)
    elif mode == "half_pixel":
        p = np.maximum(0, round_div(((2 * d + 1) * in_size - out_size) * one, 2 * out_size))
    else:
        p = round_div(d * (in_size - 1) * one, out_size - 1) if out_size > 1 else np.zeros_like(d)
    i0 = np.minimum(p >> frac_bits, in_size - 1)
    return i0, np.minimum(i0 + 1, in_size - 1), p & (one - 1)


def _lerp_int(v: np.ndarray, axis: int, taps, frac_bits: int) -> np.ndarray:
    i0, i1, f = taps
    low, high = np.take(v, i0, axis=axis), np.take(v, i1, axis=axis)
    return low * (np.int64(1) << frac_bits) + (high - low) * f.reshape((-1,) + (1,) * (v.ndim - 1 - axis))


def resize_int(layer, xs, infos):
    """NEAREST copies the integer at an integer-computed source index; BILINEAR
    interpolates A = q + zp with 2^F-scaled weights along H then W:
    out = clamp(RRS(U, 2F) - zp_out, lo, hi). The top shares the input's scale/zp."""
    same_quantization(layer, infos[0])
    x = xs[0]
    top = layer.top_shapes[0]
    method = str(layer.param("method")).upper()
    mode = str(layer.param("mode", "half_pixel")).lower()
    if x.ndim != 4 or len(top) != 4 or method not in ("NEAREST", "BILINEAR") \
            or mode not in ("half_pixel", "align_corners", "asymmetric"):
        raise layer.error(f"unsupported Resize: method '{method}', mode '{mode}', input {list(x.shape)}, "
                          f"top {list(top)} (NEAREST/BILINEAR; half_pixel/align_corners/asymmetric; NHWC)")
    (h, w), (oh, ow) = x.shape[1:3], (int(top[1]), int(top[2]))
    dy, dx = np.arange(oh, dtype=np.int64), np.arange(ow, dtype=np.int64)
    if method == "NEAREST":
        return [x[:, _nearest_index(dy, h, oh, mode)][:, :, _nearest_index(dx, w, ow, mode)]]
    frac_bits = int_param(layer, "interp_frac_bits")
    if not 0 <= frac_bits <= 22:
        raise layer.error(f"interp_frac_bits {frac_bits} outside 0..22", "interp_frac_bits")
    a = shifted(x, infos[0], layer)
    check_range(layer, absmax(a) << (2 * frac_bits + 2), "the interpolation")
    t = _lerp_int(a, 1, _bilinear_taps(dy, h, oh, mode, frac_bits), frac_bits)
    u = _lerp_int(t, 2, _bilinear_taps(dx, w, ow, mode, frac_bits), frac_bits)
    return [finish(layer, rrs(u, 2 * frac_bits))]


def softmax_int(layer, xs, infos):
    """d = max(q) - q along the axis; e = max(lookup(d), 0) (qmin_in = 0);
    out = clamp(round_div(e * Q, sum(e)), 0, Q), Q the unsigned top's qmax, zp 0."""
    x = xs[0]
    axis = int(layer.param("axis", -1))
    top = layer.top_types[0]
    if top.signed or layer.top_zps[0] != 0:
        raise layer.error(f"an integer Softmax needs an unsigned top with zp 0, got {top.name} with zp "
                          f"{layer.top_zps[0]}", "layer_top_type")
    q_max = top.qmax
    d = x.max(axis=axis, keepdims=True) - x
    e = np.maximum(lut_lookup(layer, d, layer.const("lut"), 0, infos[0].dtype.bits), 0)
    total = e.sum(axis=axis, keepdims=True)
    check_range(layer, 2 * absmax(e) * q_max + 2 * absmax(total), "the Softmax division")
    return [saturate(round_div(e * np.int64(q_max), total), 0, q_max)]


_SQRT_LIMIT = 1 << 62


def _bounded_int(layer, key, lo, hi):
    value = int_param(layer, key)
    if not lo <= value <= hi:
        raise layer.error(f"'{key}' = {value} lies outside [{lo}, {hi}]", key)
    return value


def layernorm_int(layer, xs, infos):
    """Per row of the N normalized elements (flattened): S = sum A, u = RRS(N*A - S, p),
    V = max(sum u^2 + E, 1), j the largest j >= 0 with V*4^j < 2^62, R = isqrt(V*4^j),
    n = round_div(u * 2^(j+F), R), z = n*W + biases; the output stage (per-element
    numbers along the flattened normalized axes). p, E, F = norm_shift, variance_bias,
    norm_bits."""
    a = shifted(xs[0], infos[0], layer)
    first = normalized_axes(layer, a.ndim)
    count = int(np.prod(a.shape[first:], dtype=np.int64))
    p = _bounded_int(layer, "norm_shift", 0, 62)
    e = _bounded_int(layer, "variance_bias", 0, _SQRT_LIMIT - 1)
    f = _bounded_int(layer, "norm_bits", 0, 30)
    w = weights_with_zp(layer).reshape(-1)
    biases = layer.const("biases").reshape(-1) if layer.has_const("biases") else np.zeros(1, np.int64)
    if w.size not in (1, count) or biases.size not in (1, count):
        raise layer.error(f"weights/biases of {w.size}/{biases.size} values for {count} normalized elements")
    rows = a.reshape(-1, count)
    check_range(layer, 2 * count * absmax(rows), "N*A - S")
    u = rrs(rows * np.int64(count) - rows.sum(axis=1, keepdims=True), p)
    # a float64 estimate of sum u^2 tells whether the int64 sum can overflow (all terms >= 0)
    check_range(layer, int((u.astype(np.float64) ** 2).sum(axis=1).max(initial=0) * 1.01) + e + 1,
                "the variance sum")
    variance = np.maximum((u * u).sum(axis=1) + np.int64(e), 1)
    if variance.size and variance.max() >= _SQRT_LIMIT:
        raise layer.error(f"the variance sum {variance.max()} reaches 2^62: norm_shift is too small", "norm_shift")
    # j and R per row, with Python integers
    j = np.array([max(0, (62 - int(v).bit_length()) // 2) for v in variance], np.int64)
    root = np.array([math.isqrt(int(v) << (2 * int(k))) for v, k in zip(variance, j)], np.int64)
    row_max = np.abs(u).max(axis=1, initial=0)
    check_range(layer, 2 * max((int(um) << int(k + f) for um, k in zip(row_max, j)), default=0)
                + int(root.max(initial=0)), "the division u * 2^(j+F) / R")
    num = u * np.left_shift(np.int64(1), j + f)[:, None]
    n = round_div(num, root[:, None])
    check_range(layer, absmax(n) * absmax(w) + absmax(biases), "the accumulator n*W + biases")
    z = n * w + biases
    m, s = multiplier(layer, count)
    return [output_stage(layer, z, m, s).reshape(a.shape)]


FLOAT = {}  # their float forwards are in ops/pool.py, ops/resize.py and ops/elementwise.py
INT = {"Reduce": former_format_only(reduce_int), "Resize": former_format_only(resize_int),
       "Softmax": former_format_only(softmax_int), "LayerNorm": former_format_only(layernorm_int)}
