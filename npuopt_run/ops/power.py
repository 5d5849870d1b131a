"""Pow: base (input 0) to the power of exponent (input 1), NumPy broadcasting.

Float: float32 power, as the tool chain's float forward.
Integer (the tool chain's form, through logarithms): E = q_e + zp_e;
L = lut_log[q_b - qmin(base type)] (int16 ln|x|); P = requantize(L * E, M, s) into
int16 with zero point 0; X = lut_exp[P + 32768]; out = X * sign(q_b + zp_b)^E
(a zero base: 0 for E > 0, X for E = 0, the top's largest value for E < 0), clamped to
the top's range."""
import numpy as np

from ..floats import computing_float
from ..intmath import lut_lookup, requantize
from .binary import _operands
from .stage import rescale, shifted, top_bounds

INT16 = (-(1 << 15), (1 << 15) - 1)


def pow_float(layer, xs, infos):
    base, exponent = (computing_float(x) for x in _operands(layer, xs))
    with np.errstate(all="ignore"):
        return [np.power(base, exponent)]


def _table(layer, name):
    table_type = layer.const_types.get(name)
    if table_type is None or not table_type.is_int:
        raise layer.error(f"an integer Pow needs an integer constant '{name}'", f"{name}_type")
    return layer.const(name), table_type


def pow_int(layer, xs, infos):
    q_b, q_e = _operands(layer, xs)
    big_e = shifted(q_e, infos[1], layer)
    log_table, log_type = _table(layer, "lut_log")
    exp_table, exp_type = _table(layer, "lut_exp")
    base_type = infos[0].dtype
    logs = lut_lookup(layer, q_b - base_type.qmin, log_table, base_type.bits, log_type.qmin, log_type.qmax)
    m, s = rescale(layer, 1)
    p = requantize(layer, logs * big_e, m, s, 0, *INT16)
    x = lut_lookup(layer, p - INT16[0], exp_table, 16, exp_type.qmin, exp_type.qmax)
    _, lo, hi = top_bounds(layer)
    sign = np.sign(shifted(q_b, infos[0], layer))
    odd = np.remainder(big_e, 2) != 0
    y = np.where((sign < 0) & odd, -x, x)
    y = np.where(sign == 0, np.where(big_e > 0, 0, np.where(big_e == 0, x, hi)), y)
    return [np.clip(y, lo, hi).astype(np.int64)]


FLOAT = {"Pow": pow_float}
INT = {"Pow": pow_int}
