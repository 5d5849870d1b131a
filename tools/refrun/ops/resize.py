"""Resize of H and W (NHWC) to the top shape: NEAREST or BILINEAR with
the half_pixel, align_corners or asymmetric coordinate mapping: in float
(docs/ir-ops.md) and in integers (docs/integer-semantics.md)."""
import numpy as np

from ..intmath import absmax, check_range, round_div, rrs
from .stage import finish, int_param, same_quantization, shifted


def _source(out_size: int, in_size: int, mode: str) -> np.ndarray:
    """The input coordinate of every output index."""
    d = np.arange(out_size, dtype=np.float64)
    if mode == "align_corners":
        return d * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    if mode == "half_pixel":
        return (d + 0.5) * (in_size / out_size) - 0.5
    return d * (in_size / out_size)


def _resize_axis(x: np.ndarray, axis: int, out_size: int, method: str, mode: str) -> np.ndarray:
    size = x.shape[axis]
    src = _source(out_size, size, mode)
    if method == "NEAREST":  # asymmetric floors; half_pixel and align_corners round halves up
        index = np.floor(src if mode == "asymmetric" else src + 0.5).astype(np.int64)
        return np.take(x, np.clip(index, 0, size - 1), axis=axis)
    src = np.maximum(src, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = (src - low).astype(np.float32).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    a, b = np.take(x, low, axis=axis), np.take(x, high, axis=axis)
    return a + (b - a) * frac


def resize_float(layer, xs, infos):
    x = xs[0]
    top = layer.top_shapes[0]
    if x.ndim != 4 or len(top) != 4:
        raise layer.error(f"Resize takes an NHWC input and a 4-D top shape, got {list(x.shape)} and {list(top)}")
    method = str(layer.param("method")).upper()
    mode = str(layer.param("mode", "half_pixel")).lower()
    if method not in ("NEAREST", "BILINEAR") or mode not in ("half_pixel", "align_corners", "asymmetric"):
        raise layer.error(f"unsupported Resize method/mode '{method}'/'{mode}' (NEAREST, BILINEAR; "
                          f"half_pixel, align_corners, asymmetric)", "method")
    out = _resize_axis(_resize_axis(x, 1, int(top[1]), method, mode), 2, int(top[2]), method, mode)
    return [out.astype(np.float32)]


FLOAT = {"Resize": resize_float}


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


INT = {"Resize": resize_int}
