"""Integer primitives of docs/integer-semantics.md ("Conventions" and "The
output stage"), on int64 NumPy arrays. Every function either computes the
exact mathematical integer or raises: an int64 overflow is never silent."""
import numpy as np

from .irfile import DType

_EXACT_FLOAT64 = 1 << 53
_INT64_SAFE = 1 << 62


def absmax(x) -> int:
    return int(np.abs(np.asarray(x, np.int64)).max(initial=0))


def check_range(layer, bound: int, what: str) -> None:
    """Refuse a computation whose magnitude could pass int64 (the semantics are exact integers)."""
    if bound >= _INT64_SAFE:
        raise layer.error(f"{what} could reach {bound}, beyond int64: npuopt-run does not support it")


def quantize(f: np.ndarray, scale: float, zp: int, dtype: DType) -> np.ndarray:
    """Input/Quantize: in float32, in this order: t = f*scale; t -= zp; t += 0.5;
    q = floor(t); clamp to the dtype; NaN -> 0, +inf -> qmax, -inf -> qmin."""
    f = np.asarray(f, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = f * np.float32(scale)
        t = t - np.float32(zp)
        t = t + np.float32(0.5)
        t = np.floor(t)
    t = np.where(np.isnan(t), np.float32(0), t)
    return np.clip(t, dtype.qmin, dtype.qmax).astype(np.int64)


def dequantize(q: np.ndarray, scale, zp) -> np.ndarray:
    """DeQuantize: float32(q + zp) / float32(scale)."""
    return ((np.asarray(q, np.int64) + np.int64(zp)).astype(np.float32) / np.float32(scale)).astype(np.float32)


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


def bounds(layer, dtype: DType):
    """Saturation bounds: the dtype's range, intersected with activation_qmin/qmax when present."""
    lo, hi = dtype.qmin, dtype.qmax
    if "activation_qmin" in layer.params:
        lo = max(lo, int(layer.param("activation_qmin")))
    if "activation_qmax" in layer.params:
        hi = min(hi, int(layer.param("activation_qmax")))
    return lo, hi


def saturate(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(x, lo, hi).astype(np.int64)


def exact_matmul(layer, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of integer arrays, exactly. When every partial sum is provably
    below 2^53 in magnitude the product is taken in float64 (BLAS; exact for
    such integers), else in int64."""
    bound = absmax(a) * absmax(b) * a.shape[-1]
    if bound < _EXACT_FLOAT64:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    check_range(layer, bound, "an accumulator")
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


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
