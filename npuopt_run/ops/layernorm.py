"""LayerNorm over the axes `axis` (docs/integer-semantics.md, LayerNorm), with
`weights`/`biases` holding one value per normalized element.

Float: m = mean(x), v = mean((x - m)^2), y = weights * ((x - m) / sqrt(v + epsilon)) + biases.

Integer (epsilon unused), per row of N normalized elements of q (not q + zp):
m = round_half_even(fl64(sum q) / N), d = q - m, [lo, hi] the top dtype's range,
R(X, M, s, lo, hi) = clamp(round_half_even(X * M * 2^-s), lo, hi), g(V) = (isqrt(V) +
2^15) >> 16 (fixed.inverse_sqrt: ~2^15 / sqrt V):
* input of <= 8 bits: m clamped to the input dtype's range, V = (sum d^2) >> var_shift_value,
  n = R(d * g(V), norm_scale_value, 8 + norm_shift_value, lo, hi);
* wider: V = trunc(fl64(sum d^2) / N), G = R(g(V), norm_scale_value, norm_shift_value, 0, 65535),
  n = R((d >> 1) * G, 1, 7, lo, hi);
then z = (weights + weights_zp) * n + (biases + biases_zp) (zero points per tensor or per
element of the last axis of the constant) and out = requantize(z, M, s) into the top,
M/s = scale_value/shift_value, or the constants scale/shift along the last normalized axis.
"""
import math

import numpy as np

from ..intmath import absmax, check_range, requantize
from .fixed import inverse_sqrt
from .stage import int_param, stored_ints, top_bounds

NARROW_BITS = 8
NARROW_SHIFT = 8
WIDE_SHIFT = 7
G_ROUND = 16
G_MAX = (1 << 16) - 1
FLOAT64_EXACT = 1 << 53


def normalized_axes(layer, ndim: int):
    axes = layer.param("axis", [-1])
    axes = [axes] if isinstance(axes, int) else axes
    if not isinstance(axes, list) or not axes or \
            not all(isinstance(a, int) and not isinstance(a, bool) and -ndim <= a < ndim for a in axes):
        raise layer.error(f"axis {layer.param('axis', [-1])} does not name axes of a {ndim}-D tensor", "axis")
    axes = sorted(a % ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise layer.error(f"axis {layer.param('axis')} names an axis twice", "axis")
    return tuple(axes)


def _kept_shape(shape, axes, only_last=False):
    """The input's shape with the normalized axes (or only the last of them) kept, 1 elsewhere."""
    keep = axes[-1:] if only_last else axes
    return [shape[d] if d in keep else 1 for d in range(len(shape))]


def _constant(layer, key: str, shape, integer: bool):
    """The constant `key` shaped to broadcast against the input (None when absent); as
    integers with its zero point added (one, or one per element of its last axis)."""
    if not layer.has_const(key):
        return None
    value = layer.const(key)
    if value.size != math.prod(shape):
        raise layer.error(f"'{key}' has {value.size} values for {math.prod(shape)} normalized elements",
                          key + "_shape")
    if integer:
        zp = np.asarray(stored_ints(layer, key + "_zp", key + "_zp", 0), np.int64).reshape(-1)
        last = value.shape[-1] if value.ndim else 1
        if zp.size not in (1, last):
            raise layer.error(f"{key}_zp has {zp.size} entries for a last axis of {last}", key + "_zp")
        value = value + (zp if zp.size > 1 else zp[0])
    return value.reshape(shape)


def _single_top(layer):
    if len(layer.tops) != 1:
        raise layer.error(f"{len(layer.tops)} tops (the mean and deviation outputs) are not supported",
                          "layer_top")


def layernorm_float(layer, xs, infos):
    _single_top(layer)
    x = xs[0].astype(np.float64)
    axes = normalized_axes(layer, x.ndim)
    shape = _kept_shape(x.shape, axes)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(layer.param("epsilon", 1e-5)))
    w, b = _constant(layer, "weights", shape, False), _constant(layer, "biases", shape, False)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return [y.astype(np.float32)]


def _g(layer, v):
    return (inverse_sqrt(layer, v) + (1 << (G_ROUND - 1))) >> G_ROUND


def _normalized(layer, q, axes, info):
    count = math.prod(q.shape[a] for a in axes)
    top = layer.top_types[0]
    lo, hi = top.qmin, top.qmax
    check_range(layer, absmax(q) * count, "the row sum")
    mean = np.rint(q.sum(axis=axes, keepdims=True).astype(np.float64) / count).astype(np.int64)
    m, s = int_param(layer, "norm_scale_value"), int_param(layer, "norm_shift_value")
    if info.dtype.bits <= NARROW_BITS:
        d = q - np.clip(mean, info.dtype.qmin, info.dtype.qmax)
        v = (d * d).sum(axis=axes, keepdims=True) >> int_param(layer, "var_shift_value")
        return requantize(layer, d * _g(layer, v), m, NARROW_SHIFT + s, 0, lo, hi)
    d = q - mean
    squares = (d * d).sum(axis=axes, keepdims=True)
    if squares.size and squares.max() >= FLOAT64_EXACT:
        raise layer.error("the sum of squared deviations reaches 2^53 (a float64 step would round)")
    v = np.trunc(squares.astype(np.float64) / count).astype(np.int64)
    g = requantize(layer, _g(layer, v), m, s, 0, 0, G_MAX)
    return requantize(layer, (d >> 1) * g, 1, WIDE_SHIFT, 0, lo, hi)


def layernorm_int(layer, xs, infos):
    _single_top(layer)
    q, info = xs[0], infos[0]
    axes = normalized_axes(layer, q.ndim)
    z = _normalized(layer, q, axes, info)
    shape = _kept_shape(q.shape, axes)
    w, b = _constant(layer, "weights", shape, True), _constant(layer, "biases", shape, True)
    if w is not None:
        z = w * z
    if b is not None:
        z = z + b
    m, s = stored_ints(layer, "scale", "scale_value"), stored_ints(layer, "shift", "shift_value")
    channel_shape = _kept_shape(q.shape, axes, only_last=True)
    for name, v in (("scale", m), ("shift", s)):
        if np.size(v) not in (1, math.prod(channel_shape)):
            raise layer.error(f"per-channel {name} has {np.size(v)} entries for a last normalized axis of "
                              f"{math.prod(channel_shape)}", name)
    m, s = (np.asarray(v, np.int64).reshape(channel_shape) if np.size(v) > 1 else v for v in (m, s))
    return [requantize(layer, z, m, s, *top_bounds(layer))]


FLOAT = {"LayerNorm": layernorm_float}
INT = {"LayerNorm": layernorm_int}
