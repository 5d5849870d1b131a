"""The scaled minifloat formats of a quantized IR (float8_e4m3fn, float8_e5m2; float4_e2m1fn
weights), written from their definition (sign, exponent, mantissa), in NumPy: a tensor in
such a format holds real * its scale rounded to the nearest value of the format (half to
even), saturated at its largest finite value; a rescale multiplies in float64 and rounds
through float32 (docs/integer-semantics.md, "fp8 layers")."""
import numpy as np

# name: (exponent bits, mantissa bits, exponent bias, largest finite value); e4m3fn has no
# infinities (its all-ones pattern is NaN), e5m2 has IEEE infinities and NaNs, e2m1fn
# neither (one byte per value in the .bin, the sign in bit 3)
FORMATS = {"float8_e4m3fn": (4, 3, 7, 448.0), "float8_e5m2": (5, 2, 15, 57344.0), "float4_e2m1fn": (2, 1, 1, 6.0)}


def decode(raw: np.ndarray, name: str) -> np.ndarray:
    """float32 values of the format's bytes."""
    e_bits, m_bits, bias, _ = FORMATS[name]
    b = raw.astype(np.int64)
    exponent, mantissa = (b >> m_bits) & ((1 << e_bits) - 1), (b & ((1 << m_bits) - 1)).astype(np.float64)
    value = np.where(exponent > 0, (1.0 + mantissa / (1 << m_bits)) * np.exp2(exponent - bias),
                     mantissa / (1 << m_bits) * np.exp2(1 - bias))
    top = exponent == (1 << e_bits) - 1
    if name == "float8_e5m2":
        value = np.where(top, np.where(mantissa == 0, np.inf, np.nan), value)
    elif name == "float8_e4m3fn":
        value = np.where(top & (mantissa == (1 << m_bits) - 1), np.nan, value)
    return np.where((b >> (e_bits + m_bits)) & 1 == 1, -value, value).astype(np.float32)


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """x (taken to float32 first) rounded to the nearest value of the format, half to even,
    subnormals included, saturated at +-largest; NaN gives 0. float32 result."""
    _, m_bits, bias, largest = FORMATS[name]
    v = np.asarray(x, np.float32).astype(np.float64)
    v = np.clip(np.where(np.isnan(v), 0.0, v), -largest, largest)
    _, e = np.frexp(v)  # v = f * 2^e, 0.5 <= |f| < 1: the value's own exponent is e - 1
    step = np.exp2(np.maximum(e - 1, 1 - bias) - m_bits)
    return np.clip(np.rint(v / step) * step, -largest, largest).astype(np.float32)


def quantize(f: np.ndarray, scale, name: str) -> np.ndarray:
    """A float tensor into the format: round_to(fl32(fl32(scale) * f))."""
    with np.errstate(over="ignore", invalid="ignore"):
        return round_to(np.float32(scale) * np.asarray(f, np.float32), name)


def requantize(acc: np.ndarray, scale, name: str) -> np.ndarray:
    """round_to(acc * scale): acc float64 (exact sums of the format's values), scale float32
    (a number, or one per channel along the last axis), the product in float64."""
    return round_to(np.asarray(acc, np.float64) * np.asarray(scale, np.float32).astype(np.float64), name)
