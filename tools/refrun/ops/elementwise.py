"""Eltwise, BatchNorm, Softmax and LayerNorm."""
import math

import numpy as np

from ..intmath import absmax, check_range, lut_lookup, round_div, rrs, saturate
from .activation import fused_float
from .stage import along, activation_of, int_list, int_param, multiplier, output_stage, shifted, weights_with_zp

_FLOAT_ELTWISE = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


def eltwise_method(layer, xs) -> str:
    method = str(layer.param("method")).upper()
    if method not in _FLOAT_ELTWISE:
        raise layer.error(f"unsupported Eltwise method '{method}' ({', '.join(_FLOAT_ELTWISE)})", "method")
    if len(xs) != 2:
        raise layer.error(f"Eltwise takes 2 inputs, the IR gives {len(xs)}", "layer_bottom")
    return method


def eltwise_float(layer, xs, infos):
    out = _FLOAT_ELTWISE[eltwise_method(layer, xs)](xs[0], xs[1])
    return [fused_float(layer, out.astype(np.float32))]


_INT_COMBINE = {"ADD": lambda a, b: a + b, "SUB": lambda a, b: a - b, "MAX": np.maximum, "MIN": np.minimum}


def eltwise_int(layer, xs, infos):
    """ADD/SUB/MAX/MIN: X = combine(A*Ma, B*Mb), output stage with M = 1 and the one shift.
    MUL: z = A*B, output stage with scale_value/shift_value."""
    method = eltwise_method(layer, xs)
    a, b = (shifted(x, info, layer) for x, info in zip(xs, infos))
    activation = activation_of(layer, "with_activation")
    if method == "MUL":
        check_range(layer, absmax(a) * absmax(b), "the product A*B")
        return [output_stage(layer, a * b, int_param(layer, "scale_value"), int_param(layer, "shift_value"),
                             activation)]
    ma, mb = int_list(layer, "scale_value", 2)
    check_range(layer, absmax(a) * abs(ma) + absmax(b) * abs(mb), "the scaled inputs")
    z = _INT_COMBINE[method](a * np.int64(ma), b * np.int64(mb))
    return [output_stage(layer, z, 1, int_param(layer, "shift_value"), activation)]


def batchnorm_float(layer, xs, infos):
    x = xs[0]
    axis = int(layer.param("axis", -1))
    w = layer.const("weights").astype(np.float32).ravel()
    b = layer.const("biases").astype(np.float32).ravel()
    return [(x * along(w, axis, x.ndim) + along(b, axis, x.ndim)).astype(np.float32)]


def batchnorm_int(layer, xs, infos):
    """z = A[..c..] * W[c] + biases[c] along `axis`; the output stage with per-channel
    numbers along `axis`."""
    a = shifted(xs[0], infos[0], layer)
    axis = int(layer.param("axis", -1))
    if not -a.ndim <= axis < a.ndim:
        raise layer.error(f"axis {axis} of a {a.ndim}-D input", "axis")
    w = weights_with_zp(layer).reshape(-1)
    biases = layer.const("biases").reshape(-1) if layer.has_const("biases") else np.zeros(1, np.int64)
    channels = a.shape[axis]
    if w.size not in (1, channels) or biases.size not in (1, channels):
        raise layer.error(f"weights/biases of {w.size}/{biases.size} values for axis {axis} of size {channels}")
    check_range(layer, absmax(a) * absmax(w) + absmax(biases), "the accumulator")
    z = a * along(w, axis, a.ndim) + along(biases, axis, a.ndim)
    activation = activation_of(layer, "with_activation")
    return [output_stage(layer, z, *multiplier(layer, channels), activation, axis=axis)]


def softmax_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    axis = int(layer.param("axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(np.float32)]


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


def _normalized_axes(layer, ndim: int):
    """The first normalized axis (LayerNorm normalizes the last axes only)."""
    axes = layer.param("axis")
    axes = tuple(sorted(a % ndim for a in ([axes] if isinstance(axes, int) else axes)))
    if not axes or axes != tuple(range(ndim - len(axes), ndim)):
        raise layer.error(f"LayerNorm normalizes the last axes only, got axis {list(axes)}", "axis")
    return axes[0]


def layernorm_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    first = _normalized_axes(layer, x.ndim)
    shape, axes = x.shape[first:], tuple(range(first, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(layer.param("epsilon", 1e-5)))
    y = y * layer.const("weights").reshape(shape) + layer.const("biases").reshape(shape)
    return [y.astype(np.float32)]


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
    first = _normalized_axes(layer, a.ndim)
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
    return [output_stage(layer, z, m, s, "NONE").reshape(a.shape)]


FLOAT = {"Eltwise": eltwise_float, "BatchNorm": batchnorm_float, "Softmax": softmax_float,
         "LayerNorm": layernorm_float}
INT = {"Eltwise": eltwise_int, "BatchNorm": batchnorm_int, "Softmax": softmax_int, "LayerNorm": layernorm_int}
