"""Arithmetic primitives of docs/integer-semantics.md, on NumPy arrays.

Integers are int64 and every integer function computes the exact
mathematical result or raises (an int64 overflow is never silent). Where the
tool chain deliberately computes in float32 (graph input quantization,
DeQuantize, a fused RELU, BatchNorm, AVG pooling's multiplier), the function
says so and performs that float32 step explicitly in NumPy float32; where it
computes in float64 (the rescale), the float64 rounding is reproduced in
integers, so the result is the tool chain's bit for bit.
"""
import numpy as np

_INT64_SAFE = 1 << 62
_FLOAT64_EXACT_BITS = 53
INT48 = (-(1 << 47), (1 << 47) - 1)
UINT48 = (0, (1 << 48) - 1)


def absmax(x) -> int:
    return int(np.abs(np.asarray(x, np.int64)).max(initial=0))


def check_range(layer, bound: int, what: str) -> None:
    """Refuse a computation whose magnitude could pass int64 (the semantics are exact integers)."""
    if bound >= _INT64_SAFE:
        raise layer.error(f"{what} could reach {bound}, beyond int64: npuopt-run does not support it")


# ---- rounding ------------------------------------------------------------------
def shift_round_even(v: np.ndarray, s) -> np.ndarray:
    """round_half_even(v / 2^s) for s > 0 (ties to the even integer), v * 2^-s for s <= 0.
    `s` is an int or an int array broadcasting against v."""
    v = np.asarray(v, np.int64)
    s = np.asarray(s, np.int64)
    right = np.clip(s, 0, 63)                         # |v| < 2^62: beyond 63 the result is 0 anyway
    q = np.right_shift(v, right)                      # floor(v / 2^s)
    rest = v - np.left_shift(q, right)                # in [0, 2^s)
    half = np.where(right > 0, np.left_shift(np.int64(1), np.maximum(right - 1, 0)), 1)
    up = (rest > half) | ((rest == half) & (right > 0) & (q & 1 == 1))
    return np.where(s > 0, q + up, np.left_shift(v, np.maximum(-s, 0)))


def as_float64(v: np.ndarray) -> np.ndarray:
    """The integers v rounded to the nearest float64 (53 significant bits, ties to even),
    as integers: what `v.double()` holds for an exact integer v."""
    v = np.asarray(v, np.int64)
    magnitude = np.abs(v)
    if not v.size or magnitude.max() < (1 << _FLOAT64_EXACT_BITS):
        return v
    extra = np.maximum(_bit_length(magnitude) - _FLOAT64_EXACT_BITS, 0)
    return np.left_shift(shift_round_even(v, extra), extra)


def as_float32(v: np.ndarray) -> np.ndarray:
    """The integers v rounded to the nearest float32 (ties to even), as integers: the
    tool chain's float32 step on an integer tensor (`x.float()`)."""
    return np.asarray(v, np.int64).astype(np.float32).astype(np.int64)


def _bit_length(m: np.ndarray) -> np.ndarray:
    """bit_length of non-negative int64s, exactly (no float logarithm)."""
    out = np.zeros(m.shape, np.int64)
    m = m.copy()
    for step in (32, 16, 8, 4, 2, 1):
        big = m >= (np.int64(1) << step)
        out += np.where(big, step, 0)
        m = np.where(big, m >> step, m)
    return out + (m > 0)


# ---- the rescale -------------------------------------------------------------------
def requantize(layer, x: np.ndarray, multiplier, shift, zp, lo, hi) -> np.ndarray:
    """clamp(round_half_even(x * M * 2^-shift) - zp, lo, hi), as the tool chain computes
    it in float64: the product x * M is rounded to a float64 (exact below 2^53, and
    reproduced in integers beyond), the power-of-two scaling is exact. M, shift, zp
    and the bounds are ints or int arrays broadcasting against x."""
    x = np.asarray(x, np.int64)
    m = np.asarray(multiplier, np.int64)
    s = np.asarray(shift, np.int64)
    left = int(max(0, -s.min(initial=0)))
    check_range(layer, absmax(x) * absmax(m) << left, "the rescale x * M * 2^-shift")
    y = shift_round_even(as_float64(x * m), s)
    return np.clip(y - np.asarray(zp, np.int64), lo, hi).astype(np.int64)


# ---- float <-> integer ------------------------------------------------------------
def quantize(f: np.ndarray, scale, zp, lo: int, hi: int) -> np.ndarray:
    """Graph inputs and Quantize, in float32 as the tool chain does it:
    q = round_half_even(fl32(fl32(scale * f) - zp)), clamped to [lo, hi]; NaN gives 0,
    +-inf saturate."""
    f = np.asarray(f, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.float32(scale) * f
        t = t - np.float32(zp)
        t = np.rint(t)
    t = np.clip(t, np.float32(lo), np.float32(hi))
    return np.where(np.isnan(t), np.float32(0), t).astype(np.int64)


def dequantize(q: np.ndarray, scale, zp) -> np.ndarray:
    """DeQuantize, in float32 as the tool chain does it: fl32(q + zp) * fl32(1 / scale); q
    integers, or an fp8 tensor's values (float32, added in float32)."""
    reciprocal = np.float32(1.0) / np.float32(scale)
    q = np.asarray(q)
    if np.issubdtype(q.dtype, np.floating):
        return (q.astype(np.float32) + np.float32(zp)) * reciprocal
    return (q.astype(np.int64) + np.int64(zp)).astype(np.float32) * reciprocal


def scale_approximation_f32(ratio: np.ndarray, mult_bits: int):
    """Multiplier and shift of a float32 ratio, derived at run time in float32 exactly as
    the tool chain's get_scale_approximation_params does (AVG pooling):
    t = fl32((2^b - 1) / r), b = min(mult_bits, 15); shift = min(floor(log2(t)), 31);
    M = floor(fl32(r * 2^shift) + 0.5); when every M equals 2^shift, (1, 0).
    log2 is the float64 logarithm rounded to float32 (the correctly rounded float32
    log2, which PyTorch's float32 log2 agrees with on every value tried)."""
    r = np.asarray(ratio, np.float32)
    top = np.float32(2.0 ** min(int(mult_bits), 15) - 1.0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        t = top / r
        log2 = np.log2(t.astype(np.float64)).astype(np.float32)
    shift = np.minimum(np.floor(log2), np.float32(31))
    if not np.isfinite(shift).all():
        raise ValueError(f"AVG pooling ratio {r.reshape(-1)[:4]} has no multiplier/shift")
    power = np.ldexp(np.float32(1.0), shift.astype(np.int64)).astype(np.float32)
    mult = np.floor(r * power + np.float32(0.5))
    if np.abs(mult.astype(np.float64) - power.astype(np.float64)).max(initial=0.0) < np.finfo(np.float32).eps:
        return np.ones(r.shape, np.int64), np.zeros(r.shape, np.int64)
    return mult.astype(np.int64), shift.astype(np.int64)


# ---- exact products ------------------------------------------------------------------
def exact_matmul(layer, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of integer arrays, exactly. When every partial sum is provably below 2^53
    in magnitude the product is taken in float64 (BLAS; exact for such integers),
    else in int64."""
    bound = absmax(a) * absmax(b) * a.shape[-1]
    if bound < 1 << _FLOAT64_EXACT_BITS:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    check_range(layer, bound, "an accumulator")
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


# ---- lookup tables -------------------------------------------------------------------
def lut_lookup(layer, index: np.ndarray, lut: np.ndarray, index_bits: int, lo: int, hi: int) -> np.ndarray:
    """The tool chain's table lookup: a table of 2^k entries, the entry past the end
    repeating the last one; with b = index_bits - k > 0: i = index >> b,
    r = index - i * 2^b, out = lut[i] + floor((lut[i+1] - lut[i]) * r / 2^b); with
    b <= 0 out = lut[index]. The result is clamped to [lo, hi] (the table dtype's range)."""
    table = lut.reshape(-1).astype(np.int64)
    n = table.size
    k = n.bit_length() - 1
    if n < 1 or n != 1 << k:
        raise layer.error(f"lut has {n} entries; it must have 2^n", "lut_offset")
    index = np.asarray(index, np.int64)
    if index.size and (index.min() < 0 or index.max() >= max(1 << index_bits, n)):
        raise layer.error(f"lut index {index.min()}..{index.max()} outside 0..{(1 << index_bits) - 1}")
    table = np.append(table, table[-1])
    b = index_bits - k
    if b > 0:
        i = index >> b
        r = index - (i << b)
        check_range(layer, absmax(np.diff(table)) << b, "a lut interpolation")
        out = table[i] + (((table[i + 1] - table[i]) * r) >> b)
    else:
        out = table[index]
    return np.clip(out, lo, hi).astype(np.int64)
