"""Softmax along `axis` (default: the last); float: torch's softmax in float32, as the
tool chain.

Quantized, the tool chain's forms (R(X, M, s) = qmath.requantize into the output; b, B
the input's and output's bits; d = q - max_axis(q) <= 0; S the int64 sum along the axis):

* LUT (quantize_method=LUT, no adjust_q): y = lut[d + 2^b - 1] (qmath.lut_lookup, b
  index bits, interpolated when the table is shorter than 2^b), D = max(S, 1), c = 31
  (30 when the largest entry is 1), M/s = scale_value/shift_value. If the axis is
  shorter than 8, the batch's rows (elements / axis length) are a multiple of 128 and
  b <= 8: e = c - ceil(log2(max lut)), z = trunc(((y << e) + (S >> 1)) / D),
  out = R(z, M, s + e); else e = c - ceil(log2 M), r = trunc(M * 2^e / D),
  out = R(y * r, 1, s + e). Both ceil(log2) in float32.
* FAST_EXP (adjust_q = a >= 0; Mi * 2^-si = input_scale/input_shift ~ log2(e) / s_in,
  P = pow2_out_q). a >= 8: t = (d * Mi) >> (si - a) (<< (a - si) when si <= a),
  y = qmath.pow2_fixed(t, a, P), out = pow2_fixed(t - qmath.log2_fixed(clamp(S, 1,
  2^31 - 1), P, a), a, B) saturated to the output dtype (not to the top range).
  a in {0, 1}: t = (d * Mi) >> si, y = 2^(P + t) (0 when P + t < 0),
  u = (((t + B) << a) - qmath.log2_coarse(clamp(S, 1, 2^31 - 1), P, a)) >> a,
  out = R(2^u (0 when u < 0), 1, 0).
* LUT with is_perf_mode=true and a `float_lut` constant (the tool chain's X3 form), in
  float32 with fp24 = the 8 low mantissa bits cleared: x = fp24(q), f = fp24((max - x)
  * fp24(-1 / (0.6931471 * s_in))), y = _pow2_fp24(f, float_lut), out =
  clamp(round_half_even(fp24(fp16(y)) * s_out * fp24(1 / fp24(sum y))) - zp); the
  float sum in torch's order.

npuopt writes LUT: 2^k entries (k = min(b, lut_items_in_bits)), entry i =
round(exp((i * 2^(b-k) - 2^b + 1) / s_in) * (2^m - 1)) and the last 2^m - 1 (exact at
the row's maximum, read from the last entry), m = min(31 - ceil(log2 n),
15 + ceil(ceil(log2 n) / 2)) bits for an axis of n (every sum < 2^31); the output
unsigned from its calibrated range. Where that table would be interpolated over steps
wider than MAX_LUT_STEP input units (2^(b-k) / s_in), it writes FAST_EXP with a = 15,
Mi of 13 bits and P = 31 - floor(log2 n), the output scale 2^B.
"""
import math

import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register

SMALL_AXIS = 8
SMALL_ROWS_MULTIPLE = 128
SUM_BITS = 31
FAST_EXP_MIN_FINE_ADJUST = 8
LN2_APPROX = 0.6931471
PERF_CLAMP = 126.9
MANTISSA_STEPS = (1 << 16) - 1
INTERP_BITS = 7
MAX_LUT_STEP = 1 / 16       # table steps wider than this (input units) choose FAST_EXP
FAST_EXP_ADJUST = 15
FAST_EXP_INPUT_BITS = 13    # d * Mi stays within 32 bits for 16-bit inputs


def softmax_axis(node, ndim: int) -> int:
    axis = int(node.get_param("axis", -1))
    if not -ndim <= axis < ndim:
        raise IRError(f"layer '{node.name}' ({node.type}): axis {axis} out of range for a {ndim}-D input")
    return axis % ndim


# ---- LUT ------------------------------------------------------------------------------
def ceil_log2_f32(v) -> int:
    return int(torch.ceil(torch.log2(torch.tensor(float(v), dtype=torch.float32))))


def lut_softmax(node, q: torch.Tensor, axis: int, x_t, out_t):
    table, dtype = fields.read_lut(node)
    b = x_t.qbits
    index = q - q.amax(dim=axis, keepdim=True) + ((1 << b) - 1)
    y = qmath.lut_lookup(index, table, b, dtype.bits, dtype.is_signed)
    total = y.sum(dim=axis, keepdim=True)
    denominator = total.clamp(min=1)
    table_max = float(table.max().to(torch.float32))
    c = SUM_BITS - 1 if table_max == 1 else SUM_BITS
    rescale = Rescale.read(node)
    m, s = rescale.multiplier, rescale.shift
    rows = q.numel() / q.shape[axis]
    zp, lo, hi = out_t.zerop, out_t.qmin, out_t.qmax
    if q.shape[axis] < SMALL_AXIS and rows % SMALL_ROWS_MULTIPLE == 0 and b <= 8:
        e = c - ceil_log2_f32(table_max)
        z = torch.div((y << e) + (total >> 1), denominator, rounding_mode="trunc")
        return qmath.requantize(z, m, s + e, zp, lo, hi)
    return reciprocal_rescale(y, denominator, c, m, s, zp, lo, hi)


def reciprocal_rescale(y, denominator, c: int, m: int, s: int, zp, lo, hi):
    """R(y * r, 1, s + e) with r = trunc(M * 2^e / D), e = c - ceil(log2 M) (float32):
    y / D at the rescale M/s, the tool chain's divide-once form (also LogSoftmax's)."""
    e = c - ceil_log2_f32(m)
    reciprocal = torch.div(torch.full_like(denominator, m << e), denominator, rounding_mode="trunc")
    return qmath.requantize(y * reciprocal, 1, s + e, zp, lo, hi)


# ---- FAST_EXP ---------------------------------------------------------------------------
def fast_exp_softmax(node, q: torch.Tensor, axis: int, adjust: int, out_t):
    if 1 < adjust < FAST_EXP_MIN_FINE_ADJUST:
        raise IRError(f"layer '{node.name}' (Softmax): adjust_q {adjust} is not one of 0, 1, 8..15")
    rescale = Rescale.read(node, "input_")
    mi, si = rescale.multiplier, rescale.shift
    p = int(node.get_param("pow2_out_q"))
    out_bits = out_t.qbits
    d = q - q.amax(dim=axis, keepdim=True)
    if adjust >= FAST_EXP_MIN_FINE_ADJUST:
        t = (d * mi) >> (si - adjust) if si > adjust else (d * mi) << (adjust - si)
        total = qmath.pow2_fixed(t, adjust, p).sum(dim=axis, keepdim=True).clamp(1, (1 << SUM_BITS) - 1)
        y = qmath.pow2_fixed(t - qmath.log2_fixed(total, p, adjust), adjust, out_bits)
        return y.clamp(out_t.dtype.qmin, out_t.dtype.qmax)
    t = (d * mi) >> si
    y = (1 << (p + t)) * ((p + t) >= 0)
    total = y.sum(dim=axis, keepdim=True).clamp(1, (1 << SUM_BITS) - 1)
    u = (((t + out_bits) << adjust) - qmath.log2_coarse(total, p, adjust)) >> adjust
    return qmath.requantize((1 << u) * (u >= 0), 1, 0, 0, out_t.qmin, out_t.qmax)


# ---- LUT, X3 performance mode -----------------------------------------------------------
def _fp24(v: torch.Tensor) -> torch.Tensor:
    """float32 with the 8 low mantissa bits cleared."""
    return (v.to(torch.float32).view(torch.int32) & -256).view(torch.float32)


def _pow2_fp24(f: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """2^f for f <= 0 in float32: f limited to >= -126.9, 16 fraction bits of which the
    top 9 index `table` and the low 7 interpolate, times 2^floor(f), fp24."""
    f = torch.where(f < -PERF_CLAMP, torch.tensor(-PERF_CLAMP, dtype=torch.float32), f)
    whole = f.floor()
    fraction = ((f - whole) * MANTISSA_STEPS).to(torch.int64)
    i = fraction >> INTERP_BITS
    step = table[i + 1] - table[i]
    y = table[i] + (step * (fraction & ((1 << INTERP_BITS) - 1))) * (2.0 ** -INTERP_BITS)
    return _fp24(y * (2.0 ** whole))


def perf_lut_softmax(node, q: torch.Tensor, axis: int, x_t, out_t):
    x = _fp24(q.to(torch.float32))
    factor = _fp24(-1 / (LN2_APPROX * torch.tensor([x_t.scale], dtype=torch.float32)))
    f = _fp24((x.amax(dim=axis, keepdim=True) - x) * factor)
    y = _pow2_fp24(f, node.get_constant("float_lut").betensor.to(torch.float32))
    reciprocal = _fp24(1 / _fp24(y.sum(dim=axis, keepdim=True)))
    score = _fp24(y.half().float()) * torch.tensor([out_t.scale], dtype=torch.float32) * reciprocal
    return (torch.round(score) - out_t.zerop).clamp(out_t.qmin, out_t.qmax)


@op_register(OpType.Softmax, "1.0")
def softmax_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    axis = softmax_axis(self, x_t.betensor.dim())
    if not self.quantized:
        out_t.betensor = torch.softmax(computing_float(x_t.betensor), dim=axis)
        return out_t.betensor
    q = x_t.betensor.to(torch.int64)
    adjust = int(self.get_param("adjust_q", -1))
    if self.get_param("is_perf_mode", False) and str(self.get_param("quantize_method", "")).upper() == "LUT" \
            and "float_lut" in self.constants:
        y = perf_lut_softmax(self, q, axis, x_t, out_t)
    elif adjust >= 0:
        y = fast_exp_softmax(self, q, axis, adjust, out_t)
    else:
        y = lut_softmax(self, q, axis, x_t, out_t)
    return QT.store_output(self, y, out_t)


# ---- quantize ---------------------------------------------------------------------------
def exp_table_bits(axis_length: int) -> int:
    """Width m of the exp table: the rounding of small entries (~ 2^-m) against the
    reciprocal's truncation (~ 2^(m + ceil(log2 n) - 31)), balanced, with every sum
    of n entries below 2^31."""
    ibits = max(0, math.ceil(math.log2(axis_length)))
    return max(1, min(SUM_BITS - ibits, 15 + (ibits + 1) // 2))


def exp_table(x_t, k: int, m: int) -> torch.Tensor:
    """exp(d / s_in) * (2^m - 1) at d = q - max(q), 2^k entries read at index d + 2^b - 1."""
    b = x_t.qbits
    top = (1 << m) - 1
    # entry i at index i * 2^(b-k), except the last, which the lookup repeats over the
    # final 2^(b-k) indices: it is exact at the row's maximum (index 2^b - 1)
    d = torch.arange(1 << k, dtype=torch.float64) * (1 << (b - k)) - ((1 << b) - 1)
    d[-1] = 0.0
    return torch.floor(torch.exp(d / float(x_t.scale)) * top + 0.5).clamp_(0, top)


def quantize_lut(node, x_t, out_t, axis_length: int, k: int) -> None:
    """The exp table sampled where the lookup reads it; the output unsigned from its
    calibrated range."""
    QT.quantize_activation(node, out_t, signed=False)
    m = exp_table_bits(axis_length)
    fields.write_lut(node, exp_table(x_t, k, m), Dtype.UINT16 if m <= 16 else Dtype.UINT32)
    node.params["quantize_method"] = "LUT"
    Rescale.from_ratio(out_t.scale, settings_of(node).multiplier_bits).write(node)


def quantize_fast_exp(node, x_t, out_t, axis_length: int) -> None:
    """FAST_EXP with adjust_q = FAST_EXP_ADJUST; the output is p * 2^bits (what the
    last power of two computes), unsigned."""
    bits = settings_of(node).activation_bits
    QT.set_quantization(out_t, float(1 << bits), 0, 0, (1 << bits) - 1, bits, False)
    m, s = qmath.scale_approximation(math.log2(math.e) / float(x_t.scale), FAST_EXP_INPUT_BITS)
    Rescale(m, s, Dtype.UINT16, fields.shift_dtype(s)).write(node, "input_")
    node.params["pow2_out_q"] = SUM_BITS - math.floor(math.log2(axis_length))
    node.params["adjust_q"] = FAST_EXP_ADJUST
    node.params["quantize_method"] = "FAST_EXP"
    fields.write_lut(node, qmath.LOG2_TABLE, Dtype.INT16, "log2_lut")
    fields.write_lut(node, qmath.POW2_TABLE, Dtype.UINT16, "pow2_lut")


@quant_register(OpType.Softmax, "1.0")
def softmax_quantize(self, *args):
    """LUT, unless its table is interpolated over steps wider than MAX_LUT_STEP (in
    input units): then the flat last step and the interpolation cost more than
    FAST_EXP's 8-bit tables."""
    QT.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (Softmax): unscaled or per-channel input")
    axis_length = int(x_t.ir_shape[softmax_axis(self, len(x_t.ir_shape))])
    k = min(x_t.qbits, settings_of(self).lut_items_in_bits)
    step = (1 << (x_t.qbits - k)) / float(x_t.scale)
    if k < x_t.qbits and step > MAX_LUT_STEP:
        quantize_fast_exp(self, x_t, out_t, axis_length)
    else:
        quantize_lut(self, x_t, out_t, axis_length, k)
