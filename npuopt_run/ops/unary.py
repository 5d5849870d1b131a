"""Unary math layers (docs/integer-semantics.md, "Unary math layers").

Float: the function in float64, rounded to float32 once; NaN and inf as the tool
chain's float forwards leave them, except Asin (NaN -> 2^31 - 1) and Atanh
(NaN -> the largest float32, +-inf -> the largest float32 of that sign).

Integers: Abs rescales |q + zp_in|; Negative and Sign are exact maps; the other
types look q - base up in the table `lut` (base: the input's qmin for Sqrt, Rsqrt,
Reciprocal, BNLL and 8-bit Sine/Cosine; Activation's base for the rest); Sine and
Cosine on inputs wider than 8 bits rescale q + zp_in to table steps and take them
modulo the table's size."""
import math

import numpy as np

from ..intmath import lut_lookup, requantize
from .activation import lut_index_base
from .stage import rescale, shifted, top_bounds

_erf = np.vectorize(math.erf, otypes=[np.float64])
_F32_MAX = float(np.finfo(np.float32).max)


def _asin(x):
    y = np.arcsin(x)
    return np.where(np.isnan(y), float(2 ** 31 - 1), y)


def _atanh(x):
    y = np.arctanh(x)
    return np.clip(np.where(np.isnan(y), _F32_MAX, y), -_F32_MAX, _F32_MAX)


def _bnll(x):
    return np.where(x > 0, x + np.log1p(np.exp(-x)), np.log1p(np.exp(np.minimum(x, 0))))


FUNCTIONS = {
    "Abs": np.abs, "Negative": np.negative, "Sign": np.sign,
    "Sqrt": np.sqrt, "Rsqrt": lambda x: 1.0 / np.sqrt(x), "Reciprocal": lambda x: 1.0 / x,
    "Exp": np.exp, "Log": np.log, "Erf": _erf, "Square": np.square,
    "Floor": np.floor, "Ceil": np.ceil, "Round": np.rint, "Trunc": np.trunc, "BNLL": _bnll,
    "Sine": np.sin, "Cosine": np.cos, "Tan": np.tan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asin": _asin, "Acos": np.arccos, "Atan": np.arctan, "Asinh": np.arcsinh, "Acosh": np.arccosh,
    "Atanh": _atanh,
}
FROM_QMIN = ("Sqrt", "Rsqrt", "Reciprocal", "BNLL", "Sine", "Cosine")
PERIODIC = ("Sine", "Cosine")


def _one(layer, xs):
    if len(xs) != 1:
        raise layer.error(f"takes 1 input, the IR gives {len(xs)}", "layer_bottom")
    return xs[0]


def unary_float(layer, xs, infos):
    x = _one(layer, xs).astype(np.float64)
    with np.errstate(all="ignore"):
        return [np.asarray(FUNCTIONS[layer.type](x)).astype(np.float32)]


def _table(layer):
    table_type = layer.const_types.get("lut")
    if table_type is None or not table_type.is_int:
        raise layer.error(f"integer {layer.type} needs an integer constant 'lut'", "lut_type")
    return layer.const("lut"), table_type


def lut_int(layer, xs, infos):
    """q - base looked up in `lut` (Activation's interpolated lookup)."""
    q, info = _one(layer, xs), infos[0]
    if layer.type in PERIODIC and info.dtype.bits > 8:
        return periodic_int(layer, q, info)
    table, table_type = _table(layer)
    base = info.qmin if layer.type in FROM_QMIN else lut_index_base(info)
    return [lut_lookup(layer, q - base, table, info.dtype.bits, table_type.qmin, table_type.qmax)]


def periodic_int(layer, q, info):
    """steps = round(A * M * 2^-s) into int32 (A = q + zp_in); out = lut[steps mod n]."""
    table, _ = _table(layer)
    n = table.size
    if n < 1 or n & (n - 1):
        raise layer.error(f"lut has {n} entries; it must have 2^n", "lut_offset")
    m, s = rescale(layer, 1)
    steps = requantize(layer, shifted(q, info, layer), m, s, 0, -(1 << 31), (1 << 31) - 1)
    return [table.reshape(-1).astype(np.int64)[steps & (n - 1)]]


def abs_int(layer, xs, infos):
    """With `scale_value`: requantize(|q + zp_in|, M, s) into the top. Without (an
    integer-valued input): |q| wrapped into the top's dtype."""
    q, info = _one(layer, xs), infos[0]
    if "scale_value" not in layer.params and not layer.has_const("scale"):
        dtype = layer.top_types[0]
        return [(np.abs(q) - dtype.qmin) % (1 << dtype.bits) + dtype.qmin]
    zp, lo, hi = top_bounds(layer)
    return [requantize(layer, np.abs(shifted(q, info, layer)), *rescale(layer, 1), zp, lo, hi)]


def negative_int(layer, xs, infos):
    """clamp(-(q + zp_in) - zp_out, qmin, qmax)."""
    q, info = _one(layer, xs), infos[0]
    zp, lo, hi = top_bounds(layer)
    return [np.clip(-shifted(q, info, layer) - zp, lo, hi)]


def sign_int(layer, xs, infos):
    q, info = _one(layer, xs), infos[0]
    return [np.sign(shifted(q, info, layer))]


FLOAT = {t: unary_float for t in FUNCTIONS}
INT = {t: lut_int for t in FUNCTIONS}
INT.update({"Abs": abs_int, "Negative": negative_int, "Sign": sign_int})
