"""RMSNorm over `axis` (weights over the normalized axes, per-channel rescales along the
first of them).

Float: y = weights * x / sqrt(mean(x^2) + epsilon) (+ biases).

Integer (epsilon unused), x = q + zp_in, N elements a row: V = trunc(fl64(sum x^2) / N),
G = requantize((isqrt(V) + 2^15) >> 16, norm_scale_value, norm_shift_value) into
[0, 65535], n = clamp((x * G + 2^7) >> 8) into the signed range of the top's bits, then
as LayerNorm: requantize((weights + zp) * n + (biases + zp), M, s) into the top.
"""
import numpy as np

from ..intmath import absmax, check_range, requantize
from .layernorm import G_MAX, FLOAT64_EXACT, Rows, _affine_float, _g, _kept_shape, _single_top, affine_int, axes_param
from .stage import int_param

RMS_SHIFT = 8


def rmsnorm_rows(layer, shape) -> Rows:
    axes = axes_param(layer, len(shape))
    return Rows(tuple(shape), axes, _kept_shape(shape, axes), _kept_shape(shape, axes[:1]))


def rmsnorm_float(layer, xs, infos):
    _single_top(layer)
    x = xs[0].astype(np.float64)
    rows = rmsnorm_rows(layer, x.shape)
    y = x / np.sqrt((x * x).mean(axis=rows.axes, keepdims=True) + float(layer.param("epsilon", 1e-5)))
    return [_affine_float(layer, y, rows).astype(np.float32)]


def rmsnorm_int(layer, xs, infos):
    _single_top(layer)
    rows = rmsnorm_rows(layer, xs[0].shape)
    x = xs[0] + np.int64(infos[0].quant(layer)[1])
    squares = (x * x).sum(axis=rows.axes, keepdims=True)
    check_range(layer, absmax(x) ** 2 * rows.count, "the row's sum of squares")
    if squares.size and squares.max() >= FLOAT64_EXACT:
        raise layer.error("the sum of squares reaches 2^53 (a float64 step would round)")
    v = np.trunc(squares.astype(np.float64) / rows.count).astype(np.int64)
    g = requantize(layer, _g(layer, v), int_param(layer, "norm_scale_value"), int_param(layer, "norm_shift_value"),
                   0, 0, G_MAX)
    bits = layer.top_types[0].bits
    n = np.clip((x * g + (1 << (RMS_SHIFT - 1))) >> RMS_SHIFT, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return [affine_int(layer, n, rows)]


FLOAT = {"RMSNorm": rmsnorm_float}
INT = {"RMSNorm": rmsnorm_int}
