"""Softmax along `axis` (docs/integer-semantics.md, Softmax). The integer forward takes
one of the tool chain's three forms; b, B are the input's and the top's bits, d = q -
max_axis(q) <= 0, S an int64 sum along the axis, R(X, M, s) = requantize into the top.

* LUT (no adjust_q): y = lut[d + 2^b - 1] (the interpolated lookup, b index bits),
  D = max(S, 1), c = 31 (30 when the largest entry is 1), M/s = scale_value/shift_value.
  Axis shorter than 8, rows (elements / axis length) a multiple of 128 and b <= 8:
  e = c - ceil(log2 max lut), z = floor(((y << e) + (S >> 1)) / D), out = R(z, M, s + e);
  else e = c - ceil(log2 M), r = floor(M * 2^e / D), out = R(y * r, 1, s + e). Both
  logarithms in float32.
* FAST_EXP (adjust_q = a >= 0, input_scale/input_shift = Mi/si, P = pow2_out_q).
  a >= 8: t = (d * Mi) >> (si - a) (or << (a - si)), S = sum pow2(t, a, P) clamped to
  [1, 2^31 - 1], out = pow2(t - log2_fine(S, P, a), a, B), saturated to the top dtype.
  a in {0, 1}: t = (d * Mi) >> si, y = 2^(P + t) (0 when P + t < 0), S as above,
  u = (((t + B) << a) - log2_coarse(S, P, a)) >> a, out = R(2^u (0 when u < 0), 1, 0)
  clamped to the top range (zp 0). (fixed.py holds pow2/log2_fine/log2_coarse.)
* LUT with is_perf_mode=true and a `float_lut` constant: in float32, fp24(v) = v with its
  8 low mantissa bits cleared. x = fp24(q), f = fp24((max x - x) * fp24(-1 / (0.6931471 *
  s_in))), y = 2^f from float_lut (f limited to >= -126.9; 16 fraction bits, the top 9
  index the table, the low 7 interpolate; times 2^floor(f); fp24),
  out = clamp(round_half_even(fp24(fp16(y)) * s_out * fp24(1 / fp24(sum y))) - zp). The
  float32 sum is NumPy's: it equals the tool chain's where no partial sum rounds.
"""

import numpy as np

from ..intmath import lut_lookup, requantize
from .fixed import log2_coarse, log2_fine, pow2
from .stage import int_param, stored_ints, top_bounds

SMALL_AXIS = 8
SMALL_ROWS = 128
SUM_BITS = 31
FINE_ADJUST = 8
LN2 = np.float32(0.6931471)
PERF_CLAMP = np.float32(-126.9)
MANTISSA_STEPS = np.float32((1 << 16) - 1)
INTERP_BITS = 7


def softmax_axis(layer, ndim: int) -> int:
    axis = layer.param("axis", -1)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise layer.error(f"axis {axis!r} out of range for a {ndim}-D input", "axis")
    return axis % ndim


def softmax_float(layer, xs, infos):
    x = xs[0].astype(np.float64)
    axis = softmax_axis(layer, x.ndim)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(np.float32)]


def _ceil_log2_f32(v) -> int:
    """ceil(log2(fl32(v))) with the logarithm in float32; v >= 1."""
    return int(np.ceil(np.float32(np.log2(np.float64(np.float32(v))))))


def _lut(layer, q, axis, info):
    table = layer.const("lut")
    dtype = layer.const_types["lut"]
    b = info.dtype.bits
    y = lut_lookup(layer, q - q.max(axis=axis, keepdims=True) + ((1 << b) - 1), table, b, dtype.qmin, dtype.qmax)
    total = y.sum(axis=axis, keepdims=True)
    denominator = np.maximum(total, 1)
    table_max = int(table.max(initial=0))
    if table_max < 1:
        raise layer.error("the Softmax lut holds no positive entry", "lut_offset")
    c = SUM_BITS - 1 if table_max == 1 else SUM_BITS
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    if m < 1:
        raise layer.error(f"scale_value {m} must be positive", "scale_value")
    rows = q.size // q.shape[axis] if q.shape[axis] else 0
    if q.shape[axis] < SMALL_AXIS and rows % SMALL_ROWS == 0 and b <= 8:
        e = c - _ceil_log2_f32(table_max)
        z = ((y << e) + (total >> 1)) // denominator
        return requantize(layer, z, m, s + e, *top_bounds(layer))
    return divide_once(layer, y, denominator, c, m, s, *top_bounds(layer))


def divide_once(layer, y, denominator, c: int, m: int, s: int, zp, lo, hi):
    """R(y * r, 1, s + e), r = floor(M * 2^e / D), e = c - ceil(log2 M) in float32 (also LogSoftmax's)."""
    e = c - _ceil_log2_f32(m)
    reciprocal = (m << e) // denominator
    return requantize(layer, y * reciprocal, 1, s + e, zp, lo, hi)


def _fast_exp(layer, q, axis, adjust: int):
    if 1 < adjust < FINE_ADJUST or adjust > 15:
        raise layer.error(f"adjust_q {adjust} is not one of 0, 1, 8..15", "adjust_q")
    mi = int(np.asarray(stored_ints(layer, "input_scale", "input_scale_value")).reshape(-1)[0])
    si = int(np.asarray(stored_ints(layer, "input_shift", "input_shift_value")).reshape(-1)[0])
    p = int_param(layer, "pow2_out_q")
    top = layer.top_types[0]
    d = q - q.max(axis=axis, keepdims=True)
    if adjust >= FINE_ADJUST:
        t = (d * mi) >> (si - adjust) if si > adjust else (d * mi) << (adjust - si)
        total = np.clip(pow2(t, adjust, p).sum(axis=axis, keepdims=True), 1, (1 << SUM_BITS) - 1)
        return np.clip(pow2(t - log2_fine(total, p, adjust), adjust, top.bits), top.qmin, top.qmax)
    t = (d * mi) >> si
    y = np.where(p + t >= 0, np.left_shift(np.int64(1), np.maximum(p + t, 0)), 0)
    total = np.clip(y.sum(axis=axis, keepdims=True), 1, (1 << SUM_BITS) - 1)
    u = (((t + top.bits) << adjust) - log2_coarse(total, p, adjust)) >> adjust
    powers = np.where(u >= 0, np.left_shift(np.int64(1), np.clip(u, 0, 62)), 0)
    return requantize(layer, powers, 1, 0, 0, *layer.top_range(0))


def _fp24(v) -> np.ndarray:
    """float32 with the 8 low mantissa bits cleared."""
    return (np.asarray(v, np.float32).view(np.int32) & np.int32(-256)).view(np.float32)


def _pow2_fp24(f: np.ndarray, table: np.ndarray) -> np.ndarray:
    f = np.where(f < PERF_CLAMP, PERF_CLAMP, f).astype(np.float32)
    whole = np.floor(f)
    fraction = ((f - whole) * MANTISSA_STEPS).astype(np.int64)
    i = fraction >> INTERP_BITS
    step = table[i + 1] - table[i]
    y = table[i] + (step * (fraction & ((1 << INTERP_BITS) - 1)).astype(np.float32)) * np.float32(2.0 ** -INTERP_BITS)
    return _fp24(y * np.exp2(whole).astype(np.float32))


def _perf_lut(layer, q, axis, info):
    x = _fp24(q.astype(np.float32))
    factor = _fp24(np.float32(-1) / (LN2 * np.float32(info.quant(layer)[0])))
    f = _fp24((x.max(axis=axis, keepdims=True) - x) * factor)
    y = _pow2_fp24(f, layer.const("float_lut").astype(np.float32).reshape(-1))
    reciprocal = _fp24(np.float32(1) / _fp24(y.sum(axis=axis, keepdims=True, dtype=np.float32)))
    zp, lo, hi = top_bounds(layer)
    score = _fp24(y.astype(np.float16).astype(np.float32)) * np.float32(layer.top_scales[0]) * reciprocal
    return np.clip(np.rint(score) - zp, lo, hi).astype(np.int64)


def softmax_int(layer, xs, infos):
    q, info = xs[0], infos[0]
    axis = softmax_axis(layer, q.ndim)
    adjust = int_param(layer, "adjust_q", -1)
    if layer.param("is_perf_mode", False) is True and str(layer.param("quantize_method", "")).upper() == "LUT" \
            and layer.has_const("float_lut"):
        return [_perf_lut(layer, q, axis, info)]
    if adjust >= 0:
        return [_fast_exp(layer, q, axis, adjust)]
    return [_lut(layer, q, axis, info)]


FLOAT = {"Softmax": softmax_float}
INT = {"Softmax": softmax_int}
