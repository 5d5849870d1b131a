"""The broadcasting arithmetic layers: Add, Sub, Mul (an Eltwise of that method), Div,
SquaredDifference and Gemm. Operands broadcast as NumPy does."""
import dataclasses

import numpy as np

from ..floats import computing_float
from ..intmath import absmax, check_range, exact_matmul, lut_lookup, requantize
from .elementwise import eltwise_float, eltwise_int
from .stage import rescale, shifted, stored_ints, top_bounds

INT32 = (-(1 << 31), (1 << 31) - 1)


def _operands(layer, xs, counts=(2,)):
    """The inputs, checked: their number and that the first two broadcast."""
    if len(xs) not in counts:
        raise layer.error(f"takes {' or '.join(map(str, counts))} inputs, the IR gives {len(xs)}", "layer_bottom")
    try:
        np.broadcast_shapes(xs[0].shape, xs[1].shape)
    except ValueError:
        raise layer.error(f"input shapes {list(xs[0].shape)} and {list(xs[1].shape)} do not broadcast",
                          "layer_bottom_shape") from None
    return xs


def _as_eltwise(method):
    """Add/Sub/Mul are an Eltwise of `method` (float32 operands, as the tool chain; float64
    ones stay: floats.computing_float)."""
    def as_method(layer):
        return dataclasses.replace(layer, params={**layer.params, "method": method})

    def float_fn(layer, xs, infos):
        return eltwise_float(as_method(layer), [computing_float(x) for x in _operands(layer, xs)], infos)

    def int_fn(layer, xs, infos):
        return eltwise_int(as_method(layer), _operands(layer, xs), infos)
    return float_fn, int_fn


# ---- Div ------------------------------------------------------------------------------
def div_float(layer, xs, infos):
    a, b = (computing_float(x) for x in _operands(layer, xs))
    with np.errstate(divide="ignore", invalid="ignore"):
        return [a / b]


def div_int(layer, xs, infos):
    """X = q_a + zp_a, Y = q_b + zp_b; r = the uint16 `lut` at index |Y| (interpolated over
    the divisor's bits); Z = sign(Y) * X * r, sign(0) = +1; out = requantize(Z, M, s)."""
    a, b = _operands(layer, xs)
    x, y = shifted(a, infos[0], layer), shifted(b, infos[1], layer)
    table_type = layer.const_types.get("lut")
    if table_type is None or not table_type.is_int:
        raise layer.error("an integer Div needs an integer constant 'lut'", "lut_type")
    r = lut_lookup(layer, np.abs(y), layer.const("lut"), infos[1].dtype.bits, table_type.qmin, table_type.qmax)
    z = np.where(y < 0, -1, 1) * x * r
    m, s = rescale(layer, 1)
    return [requantize(layer, z, m, s, *top_bounds(layer))]


# ---- SquaredDifference ------------------------------------------------------------------
def _three(layer, constant, param):
    v = np.asarray(stored_ints(layer, constant, param), np.int64).reshape(-1)
    if v.size != 3:
        raise layer.error(f"{param} must hold 3 values [output, input 0, input 1], got {v.tolist()}", param)
    return v


def squared_difference_float(layer, xs, infos):
    a, b = (computing_float(x) for x in _operands(layer, xs))
    return [(a - b) * (a - b)]


def squared_difference_int(layer, xs, infos):
    """A' = requantize(q_a + zp_a, M_a, s_a), B' likewise (into int32, zero point 0),
    D = min((A' - B')^2, 2^31 - 1), out = requantize(D, M_out, s_out); scale_value and
    shift_value are [output, input 0, input 1]."""
    a, b = _operands(layer, xs)
    m, s = _three(layer, "scale", "scale_value"), _three(layer, "shift", "shift_value")
    a = requantize(layer, shifted(a, infos[0], layer), m[1], s[1], 0, *INT32)
    b = requantize(layer, shifted(b, infos[1], layer), m[2], s[2], 0, *INT32)
    d = np.minimum((a - b) * (a - b), INT32[1])
    return [requantize(layer, d, m[0], s[0], *top_bounds(layer))]


# ---- Gemm ---------------------------------------------------------------------------------
def _gemm_operands(layer, xs):
    if len(xs) not in (2, 3):
        raise layer.error(f"takes 2 or 3 inputs, the IR gives {len(xs)}", "layer_bottom")
    a, b = xs[:2]
    if layer.param("trans_a", False):
        a = np.swapaxes(a, -1, -2)
    if layer.param("trans_b", False):
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise layer.error(f"A' {list(a.shape)} and B' {list(b.shape)} do not multiply", "layer_bottom_shape")
    return a, b


def _sign(layer, key) -> int:
    return -1 if float(layer.param(key, 1.0)) < 0 else 1


def gemm_float(layer, xs, infos):
    a, b = _gemm_operands(layer, [computing_float(x) for x in xs])
    y = np.matmul(a, b) * np.float32(layer.param("alpha", 1.0))
    if len(xs) == 3:
        y = y + computing_float(xs[2]) * np.float32(layer.param("beta", 1.0))
    return [y.astype(np.float32)]


def gemm_int(layer, xs, infos):
    """P = (q_a + zp_a)' @ (q_b + zp_b)'. Three inputs (scale_value = [M, M_p, M_c], one
    shift_value): out = requantize(sign(alpha) M_p P + sign(beta) M_c (q_c + zp_c), M, s).
    Two inputs: out = sign(alpha) * requantize(P, M, s), saturated to the top's dtype."""
    a, b = _gemm_operands(layer, [shifted(x, info, layer) for x, info in zip(xs[:2], infos)])
    p = exact_matmul(layer, a, b)
    zp, lo, hi = top_bounds(layer)
    if len(xs) == 2:
        m, s = rescale(layer, 1)
        dtype = layer.top_types[0]
        return [np.clip(requantize(layer, p, m, s, zp, lo, hi) * _sign(layer, "alpha"), dtype.qmin, dtype.qmax)]
    m = np.asarray(stored_ints(layer, "scale", "scale_value"), np.int64).reshape(-1)
    if m.size != 3:
        raise layer.error(f"scale_value must be [M, M_p, M_c], got {m.tolist()}", "scale_value")
    c = shifted(xs[2], infos[2], layer)
    check_range(layer, max(absmax(p) * int(m[1]), absmax(c) * int(m[2])), "a Gemm branch")
    acc = p * (m[1] * _sign(layer, "alpha")) + c * (m[2] * _sign(layer, "beta"))
    return [requantize(layer, acc, m[0], stored_ints(layer, "shift", "shift_value"), zp, lo, hi)]


_ADD, _SUB, _MUL = _as_eltwise("ADD"), _as_eltwise("SUB"), _as_eltwise("MUL")
FLOAT = {"Add": _ADD[0], "Sub": _SUB[0], "Mul": _MUL[0], "Div": div_float,
         "SquaredDifference": squared_difference_float, "Gemm": gemm_float}
INT = {"Add": _ADD[1], "Sub": _SUB[1], "Mul": _MUL[1], "Div": div_int,
       "SquaredDifference": squared_difference_int, "Gemm": gemm_int}
