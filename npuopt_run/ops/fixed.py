"""The tool chain's fixed-point helpers (LayerNorm's inverse square root, Softmax's
FAST_EXP powers and logarithms), on int64 arrays. Each works on a value normalized
into [2^30, 2^31) and reads a small table; the tables are built here from their
formulas (the tool chain computes with its own built-in copies, not with the
tables an IR stores for the NPU).
"""
import math

import numpy as np

ISQRT = np.array([min(32767, math.floor(32768 / math.sqrt(1 + i / 64) + 0.5)) for i in range(193)], np.int64)
LOG2 = np.array([math.floor(math.log2(1 + i / 256) * 32768 + 0.5) for i in range(256)], np.int64)
POW2 = np.array([math.floor(2 ** (i / 256) * 32768 + 0.5) for i in range(256)], np.int64)
SQRT2_Q30 = math.floor(2 ** 30.5 + 0.5)
Q30 = 1 << 30


def normalize_q30(v: np.ndarray):
    """(v * 2^n, n): n the left shifts, at most 30, while v < 2^30 (30 for v <= 1)."""
    v = np.asarray(v, np.int64).copy()
    n = np.zeros(v.shape, np.int64)
    for _ in range(30):
        low = v < Q30
        v = np.where(low, v << 1, v)
        n += low
    return v, n


def shift_right_or_zero(v: np.ndarray, s: np.ndarray) -> np.ndarray:
    """v >> s for non-negative v; 0 where s < 0 or s >= 64 (what the tool chain's int64
    shifts give there)."""
    s = np.asarray(s, np.int64)
    ok = (s >= 0) & (s < 64)
    return np.where(ok, np.right_shift(v, np.where(ok, s, 0)), 0)


def inverse_sqrt(layer, v: np.ndarray) -> np.ndarray:
    """~2^31 / sqrt(v) for 0 <= v < 2^31: v = m * 2^e (m normalized), m halved when e
    is odd, the table entry at m's top bits interpolated on the next 15 bits, then
    shifted right by (e - 1) // 2."""
    v = np.asarray(v, np.int64)
    if v.size and (v.min() < 0 or v.max() >= 1 << 31):
        raise layer.error(f"inverse square root of {v.max()}: the tool chain's form needs 0 <= v < 2^31")
    m, n = normalize_q30(v)
    e = 31 - n
    m = np.where((e & 1) == 1, m >> 1, m) >> 7
    e = (e - 1) >> 1
    i = np.maximum((m >> 16) - 64, 0)
    frac = (m >> 1) & 0x7FFF
    y0 = ISQRT[i]
    return ((y0 << 16) - (((y0 - ISQRT[i + 1]) * frac) << 1)) >> e


def pow2(x: np.ndarray, in_bits: int, out_bits) -> np.ndarray:
    """2^(x / 2^in_bits) * 2^out_bits for x <= 0 (in_bits >= 8): POW2 at the fraction's
    top 8 bits (no interpolation), (entry << 15) >> (30 - out_bits - floor part)."""
    x = np.asarray(x, np.int64)
    whole = x >> in_bits
    i = (x & ((1 << in_bits) - 1)) >> (in_bits - 8)
    return shift_right_or_zero(POW2[i] << 15, 30 - np.asarray(out_bits, np.int64) - whole)


def log2_fine(x: np.ndarray, in_bits: int, out_bits: int) -> np.ndarray:
    """log2(x / 2^in_bits) * 2^out_bits for x >= 1: LOG2 at the 8 bits after the
    normalized leading one, (entry << 15) >> (30 - out_bits), minus (n - 30 + in_bits)
    * 2^out_bits."""
    m, n = normalize_q30(x)
    y = (LOG2[(m >> 22) & 0xFF] << 15) >> (30 - out_bits)
    return y - ((n - (30 - in_bits)) << out_bits)


def log2_coarse(x: np.ndarray, in_bits: int, out_bits: int) -> np.ndarray:
    """The integer part of log2(x / 2^in_bits) times 2^out_bits, plus 1 when out_bits > 0
    and the normalized x passes 2^30.5."""
    m, n = normalize_q30(x)
    half = (m > SQRT2_Q30).astype(np.int64) if out_bits else np.zeros(m.shape, np.int64)
    return half - ((n - (30 - in_bits)) << out_bits)
