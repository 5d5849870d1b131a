"""LayerNorm, GroupNorm, InstanceNorm and MVN: one normalization of rows followed by
weights and biases (docs/integer-semantics.md, LayerNorm). Per type a `Rows` says how
the input is viewed (GroupNorm splits its channel axis `axis` into `group` groups), over
which axes of that view a row lies, and how weights/biases (one value per element of the
normalized axes for LayerNorm and MVN, per channel for GroupNorm and InstanceNorm) and
per-channel zero points and rescales broadcast against the input:
* LayerNorm and MVN: rows over `axis`; per-channel values along its last axis;
* InstanceNorm: rows over `axis`, by default every axis between the first and the last;
  weights per channel (the last axis);
* GroupNorm: rows = the groups of each batch item, all their elements.

Float: m = mean(x), v = mean((x - m)^2), y = weights * ((x - m) / sqrt(v + epsilon)) + biases.

Integer (epsilon unused), per row of N elements of q (not q + zp):
m = round_half_even(fl64(sum q) / N), d = q - m, [lo, hi] the top dtype's range,
R(X, M, s, lo, hi) = clamp(round_half_even(X * M * 2^-s), lo, hi), g(V) = (isqrt(V) +
2^15) >> 16 (fixed.inverse_sqrt: ~2^15 / sqrt V), (M_n, s_n) = norm_scale_value/norm_shift_value
(MVN: scale_value/shift_value):
* input of <= 8 bits: m clamped to the input dtype's range, V = (sum d^2) >> var_shift_value,
  n = R(d * g(V), M_n, 8 + s_n, lo, hi);
* wider: V = trunc(fl64(sum d^2) / N), G = R(g(V), M_n, s_n, 0, 65535),
  n = R((d >> 1) * G, 1, 7, lo, hi);
then z = (weights + weights_zp) * n + (biases + biases_zp) (zero points per tensor or per
element of the last axis of the constant) and out = requantize(z, M, s) into the top,
M/s = scale_value/shift_value, or the constants scale/shift per channel. MVN has no
weights and stores n at the top's scale: out = clamp(n - zp_out, top range).
"""
import math
from dataclasses import dataclass
from typing import List, Tuple

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


@dataclass
class Rows:
    view: Tuple[int, ...]
    axes: Tuple[int, ...]
    const_shape: List[int]
    channel_shape: List[int]

    @property
    def count(self) -> int:
        return math.prod(self.view[a] for a in self.axes)


def _kept_shape(shape, keep):
    return [shape[d] if d in keep else 1 for d in range(len(shape))]


def axes_param(layer, ndim: int, key="axis", default=None):
    axes = layer.param(key, default) if default is not None else layer.param(key)
    axes = [axes] if isinstance(axes, int) else axes
    if not isinstance(axes, list) or not axes or \
            not all(isinstance(a, int) and not isinstance(a, bool) and -ndim <= a < ndim for a in axes):
        raise layer.error(f"{key} {axes} does not name axes of a {ndim}-D tensor", key)
    axes = sorted(a % ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise layer.error(f"{key} {layer.param(key)} names an axis twice", key)
    return tuple(axes)


def normalized_axes(layer, ndim: int):
    return axes_param(layer, ndim, "axis", [-1])


def layernorm_rows(layer, shape) -> Rows:
    axes = normalized_axes(layer, len(shape))
    return Rows(tuple(shape), axes, _kept_shape(shape, axes), _kept_shape(shape, axes[-1:]))


def mvn_rows(layer, shape) -> Rows:
    axes = axes_param(layer, len(shape))
    return Rows(tuple(shape), axes, _kept_shape(shape, axes), _kept_shape(shape, axes[-1:]))


def instancenorm_rows(layer, shape) -> Rows:
    ndim = len(shape)
    if "axis" in layer.params:
        axes = axes_param(layer, ndim)
    elif ndim < 3:
        raise layer.error(f"a {ndim}-D input has no axes between batch and channel", "axis")
    else:
        axes = tuple(range(1, ndim - 1))
    kept = _kept_shape(shape, [ndim - 1])
    return Rows(tuple(shape), axes, kept, kept)


def groupnorm_rows(layer, shape) -> Rows:
    ndim = len(shape)
    axis, group = layer.param("axis"), layer.param("group")
    if not isinstance(axis, int) or isinstance(axis, bool) or not -ndim <= axis < ndim or axis % ndim == 0:
        raise layer.error(f"axis {axis} is not a non-batch axis of a {ndim}-D tensor", "axis")
    c = axis % ndim
    if not isinstance(group, int) or isinstance(group, bool) or group <= 0 or shape[c] % group:
        raise layer.error(f"group {group} does not divide the {shape[c]} channels", "group")
    view = tuple(shape[:c]) + (group, shape[c] // group) + tuple(shape[c + 1:])
    kept = _kept_shape(shape, [c])
    return Rows(view, tuple(d for d in range(len(view)) if d not in (0, c)), kept, kept)


def constant(layer, key: str, rows: Rows, integer: bool):
    """The constant `key` shaped to broadcast against the input (None when absent); as
    integers with its zero point added (one, or one per element of its last axis)."""
    if not layer.has_const(key):
        return None
    value = layer.const(key)
    size = math.prod(rows.const_shape)
    if value.size != size:
        raise layer.error(f"'{key}' has {value.size} values for {size} elements", key + "_shape")
    if integer:
        zp = np.asarray(stored_ints(layer, key + "_zp", key + "_zp", 0), np.int64).reshape(-1)
        last = value.shape[-1] if value.ndim else 1
        if zp.size not in (1, last):
            raise layer.error(f"{key}_zp has {zp.size} entries for a last axis of {last}", key + "_zp")
        value = value + (zp if zp.size > 1 else zp[0])
    return value.reshape(rows.const_shape)


def _single_top(layer):
    if len(layer.tops) != 1:
        raise layer.error(f"{len(layer.tops)} tops (the mean and deviation outputs) are not supported",
                          "layer_top")


def normalized_float(layer, x, rows: Rows, default_eps: float):
    x = x.astype(np.float64)
    v = x.reshape(rows.view)
    mean = v.mean(axis=rows.axes, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=rows.axes, keepdims=True)
    return ((v - mean) / np.sqrt(var + float(layer.param("epsilon", default_eps)))).reshape(x.shape)


def _affine_float(layer, y, rows: Rows):
    w, b = constant(layer, "weights", rows, False), constant(layer, "biases", rows, False)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _float(rows_of, default_eps=1e-5):
    def forward(layer, xs, infos):
        _single_top(layer)
        rows = rows_of(layer, xs[0].shape)
        y = normalized_float(layer, xs[0], rows, default_eps)
        return [_affine_float(layer, y, rows).astype(np.float32)]
    return forward


def _g(layer, v):
    return (inverse_sqrt(layer, v) + (1 << (G_ROUND - 1))) >> G_ROUND


def normalized_int(layer, q, rows: Rows, info, m, s):
    """n of the module docstring, in the input's shape; (m, s) n's rescale."""
    count = rows.count
    shape = q.shape
    q = q.reshape(rows.view)
    axes = rows.axes
    top = layer.top_types[0]
    lo, hi = top.qmin, top.qmax
    check_range(layer, absmax(q) * count, "the row sum")
    mean = np.rint(q.sum(axis=axes, keepdims=True).astype(np.float64) / count).astype(np.int64)
    if info.dtype.bits <= NARROW_BITS:
        d = q - np.clip(mean, info.dtype.qmin, info.dtype.qmax)
        v = (d * d).sum(axis=axes, keepdims=True) >> int_param(layer, "var_shift_value")
        n = requantize(layer, d * _g(layer, v), m, NARROW_SHIFT + s, 0, lo, hi)
    else:
        d = q - mean
        squares = (d * d).sum(axis=axes, keepdims=True)
        if squares.size and squares.max() >= FLOAT64_EXACT:
            raise layer.error("the sum of squared deviations reaches 2^53 (a float64 step would round)")
        v = np.trunc(squares.astype(np.float64) / count).astype(np.int64)
        g = requantize(layer, _g(layer, v), m, s, 0, 0, G_MAX)
        n = requantize(layer, (d >> 1) * g, 1, WIDE_SHIFT, 0, lo, hi)
    return n.reshape(shape)


def affine_int(layer, z, rows: Rows):
    """requantize((weights + zp) * z + (biases + zp), M, s) into the top."""
    w, b = constant(layer, "weights", rows, True), constant(layer, "biases", rows, True)
    if w is not None:
        z = w * z
    if b is not None:
        z = z + b
    m, s = stored_ints(layer, "scale", "scale_value"), stored_ints(layer, "shift", "shift_value")
    channels = math.prod(rows.channel_shape)
    for name, v in (("scale", m), ("shift", s)):
        if np.size(v) not in (1, channels):
            raise layer.error(f"per-channel {name} has {np.size(v)} entries for {channels} channels", name)
    m, s = (np.asarray(v, np.int64).reshape(rows.channel_shape) if np.size(v) > 1 else v for v in (m, s))
    return requantize(layer, z, m, s, *top_bounds(layer))


def _int(rows_of):
    def forward(layer, xs, infos):
        _single_top(layer)
        rows = rows_of(layer, xs[0].shape)
        n = normalized_int(layer, xs[0], rows, infos[0], int_param(layer, "norm_scale_value"),
                           int_param(layer, "norm_shift_value"))
        return [affine_int(layer, n, rows)]
    return forward


def mvn_int(layer, xs, infos):
    rows = mvn_rows(layer, xs[0].shape)
    if layer.has_const("weights") or layer.has_const("biases"):
        raise layer.error("weights or biases on a quantized MVN are not supported", "weights")
    n = normalized_int(layer, xs[0], rows, infos[0], int_param(layer, "scale_value"), int_param(layer, "shift_value"))
    return [requantize(layer, n, 1, 0, *top_bounds(layer))]


FLOAT = {"LayerNorm": _float(layernorm_rows), "GroupNorm": _float(groupnorm_rows),
         "InstanceNorm": _float(instancenorm_rows), "MVN": _float(mvn_rows, 1e-9)}
INT = {"LayerNorm": _int(layernorm_rows), "GroupNorm": _int(groupnorm_rows),
       "InstanceNorm": _int(instancenorm_rows), "MVN": mvn_int}
