"""Comparison and selection layers: Logical, Where, Cast (docs/integer-semantics.md).

Logical   comparisons: (q0 + zp0) * M0 against (q1 + zp1) * M1 (scale_value = [M0, M1]);
          AND/OR/XOR/NOT: the codes q themselves, nonzero is true; the top is 0/1.
Where     x_i' = requantize(q_i + zp_i, M_i, s_i) (lists of two), picked by q0 + zp0 != 0.
Cast      with scale_value: requantize(q + zp_in, M, s); without: SATURATION clamps
          q + zp_in - zp_out (zero points 0 when ignore_scale_zp) into to_dtype,
          TRUNCATION wraps q into it."""
import numpy as np

from ..intmath import requantize
from ..irfile import DTYPES
from .stage import rescale, shifted, stored_ints, top_bounds

COMPARE = {"EQUAL": np.equal, "NOT_EQUAL": np.not_equal, "GREATER": np.greater,
           "GREATER_EQUAL": np.greater_equal, "LESS": np.less, "LESS_EQUAL": np.less_equal}
BOOLEAN = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}
CAST_INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
CAST_FLOATS = ("float32", "float16", "bfloat16", "float8_e5m2", "float8_e4m3fn")


def count_inputs(layer, xs, n):
    if len(xs) != n:
        raise layer.error(f"takes {n} input{'s' if n > 1 else ''}, the IR gives {len(xs)}", "layer_bottom")
    try:
        np.broadcast_shapes(*(x.shape for x in xs))
    except ValueError:
        raise layer.error(f"input shapes {[list(x.shape) for x in xs]} do not broadcast",
                          "layer_bottom_shape") from None


def _choice(layer, key, choices, default=None):
    value = str(layer.param(key) if default is None else layer.param(key, default))
    if value.upper() not in [c.upper() for c in choices]:
        raise layer.error(f"unsupported {key} '{value}' (supported: {', '.join(choices)})", key)
    return value.upper() if choices[0].isupper() else value.lower()


# ---- Logical --------------------------------------------------------------------------
def _method(layer, xs):
    method = _choice(layer, "method", list(COMPARE) + list(BOOLEAN) + ["NOT"])
    count_inputs(layer, xs, 1 if method == "NOT" else 2)
    return method


def _logical(method, xs):
    if method == "NOT":
        return np.logical_not(xs[0] != 0)
    if method in BOOLEAN:
        return BOOLEAN[method](xs[0] != 0, xs[1] != 0)
    return COMPARE[method](xs[0], xs[1])


def logical_float(layer, xs, infos):
    return [_logical(_method(layer, xs), xs).astype(np.uint8)]


def logical_int(layer, xs, infos):
    method = _method(layer, xs)
    if method in COMPARE:
        m = np.asarray(stored_ints(layer, "scale", "scale_value"), np.int64).reshape(-1)
        if m.size != 2:
            raise layer.error(f"scale_value must be [M0, M1], got {m.tolist()}", "scale_value")
        xs = [shifted(x, info, layer) * m[i] for i, (x, info) in enumerate(zip(xs, infos))]
    return [_logical(method, xs).astype(np.int64)]


# ---- Where ----------------------------------------------------------------------------
def where_float(layer, xs, infos):
    count_inputs(layer, xs, 3)
    cond, a, b = xs
    if a.dtype != b.dtype:  # the narrower operand takes the wider one's type (x1's on a tie)
        if a.dtype.itemsize >= b.dtype.itemsize:
            b = b.astype(a.dtype)
        else:
            a = a.astype(b.dtype)
    return [np.where(cond != 0, a, b)]


def two_rescales(layer):
    """(M, s): `scale_value`/`shift_value` as lists of two, one rescale per branch."""
    m = np.asarray(stored_ints(layer, "scale", "scale_value"), np.int64).reshape(-1)
    s = np.asarray(stored_ints(layer, "shift", "shift_value"), np.int64).reshape(-1)
    if m.size != 2 or s.size != 2:
        raise layer.error(f"scale_value/shift_value must be lists of two, got {m.tolist()}/{s.tolist()}",
                          "scale_value")
    return m, s


def where_int(layer, xs, infos):
    count_inputs(layer, xs, 3)
    m, s = two_rescales(layer)
    zp, lo, hi = top_bounds(layer)
    picked = [requantize(layer, shifted(x, info, layer), m[i], s[i], zp, lo, hi)
              for i, (x, info) in enumerate(zip(xs[1:], infos[1:]))]
    return [np.where(shifted(xs[0], infos[0], layer) != 0, *picked)]


# ---- Cast -----------------------------------------------------------------------------
def _cast_params(layer):
    to = _choice(layer, "to_dtype", CAST_INTEGERS + CAST_FLOATS)
    clip = _choice(layer, "clip_mode", ("SATURATION", "TRUNCATION"), "SATURATION")
    ignore = layer.param("ignore_scale_zp", False)
    if ignore not in (True, False, 0, 1):
        raise layer.error(f"ignore_scale_zp must be true or false, got {ignore!r}", "ignore_scale_zp")
    return to, clip, bool(ignore)


def _into(v, dtype, clip):
    v = np.asarray(v, np.int64)
    if clip == "SATURATION":
        return np.clip(v, dtype.qmin, dtype.qmax)
    return (v - dtype.qmin) % (1 << dtype.bits) + dtype.qmin


def cast_float(layer, xs, infos):
    to, clip, _ = _cast_params(layer)
    count_inputs(layer, xs, 1)
    x = xs[0]
    if to in CAST_FLOATS:
        return [x.astype(np.float32)]
    with np.errstate(invalid="ignore"):
        v = np.trunc(x).astype(np.int64) if np.issubdtype(x.dtype, np.floating) else x.astype(np.int64)
    return [_into(v, DTYPES[to], clip)]


def cast_int(layer, xs, infos):
    to, clip, ignore = _cast_params(layer)
    count_inputs(layer, xs, 1)
    q, info = xs[0], infos[0]
    if "scale_value" in layer.params or layer.has_const("scale"):
        top = layer.top_types[0]
        if not top.is_int or top.bits > 16:
            raise layer.error(f"a rescale into {top.name} (wider than 16 bits, left unrounded by the tool chain) "
                              f"is not supported yet", "layer_top_type")
        zp, lo, hi = top_bounds(layer)
        return [requantize(layer, shifted(q, info, layer), *rescale(layer, 1), zp, lo, hi)]
    if to in CAST_FLOATS:
        raise layer.error(f"an integer cast to {to} is not supported yet", "to_dtype")
    v = np.asarray(q, np.int64)
    if clip == "SATURATION" and not ignore:
        zp, _, _ = top_bounds(layer)
        v = shifted(v, info, layer) - zp
    return [_into(v, DTYPES[to], clip)]


FLOAT = {"Logical": logical_float, "Where": where_float, "Cast": cast_float}
INT = {"Logical": logical_int, "Where": where_int, "Cast": cast_int}
