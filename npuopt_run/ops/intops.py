"""Integer and check layers: BitShift, Bitwise, Mod, DivMod, IsInf, IsNaN, CTCGreedyDecoder
(docs/ir-ops.md, docs/integer-semantics.md).

BitShift  NumPy's shifts of input 0 in input 0's type: LEFT keeps the low bits of x << s
          (x << s & (2^bits - 1), cast back to the type), RIGHT x >> s; NumPy's int64
          shifts give 0 (LEFT) or the sign (RIGHT) past 63 bits or for a negative s.
Bitwise   AND/OR/XOR/NOT of the integers in their NumPy types, cast into the top's type.
Mod       float: in float32 (floats as the layer holds them), fmod or a - floor_div(a, b) * b;
          integers: x_i = requantize(q_i + zp_i, M_i, s_i) clamped to input i's range
          (zero point 0), out = clamp(mod(x_0, x_1) - zp_out) with a zero x_1 taken as 1.
DivMod    quotient (floor or trunc) and a - b * q of the integers; 0 for a zero divisor.
IsInf/IsNaN  the 0/1 mask (an integer input holds neither).
CTCGreedyDecoder  per sample the best class of its first L steps, repeats merged, the
          blank (last class) dropped, padded with the top type's largest value.
Every integer top is clamped to its type's range, as the tool chain fits its tops."""
import numpy as np

from ..intmath import requantize
from .select import count_inputs, two_rescales
from .stage import shifted, top_bounds


def _integers_of(layer, xs, infos):
    """The inputs as arrays of their own integer types (NumPy's)."""
    for info in infos:
        if not info.is_int or info.dtype.bits > 32:
            raise layer.error(f"takes integer inputs of at most 32 bits, '{info.name}' is {info.dtype.name}",
                              "layer_bottom_type")
    return [np.asarray(x).astype(info.dtype.name) for x, info in zip(xs, infos)]


def _fit(layer, y, i=0):
    """Top i's value: NaN 0, clamped to its integer type (int64), or float32 for a float top."""
    dtype = layer.top_types[i]
    if not dtype.is_int:
        return np.asarray(y, np.float32)
    y = np.asarray(y)
    if y.dtype.kind == "f":
        y = np.trunc(np.nan_to_num(y.astype(np.float64), nan=0.0, posinf=dtype.qmax, neginf=dtype.qmin))
    return np.clip(y, dtype.qmin, dtype.qmax).astype(np.int64)


def _choice(layer, key, choices, default=None):
    value = str(layer.param(key) if default is None else layer.param(key, default)).upper()
    if value not in choices:
        raise layer.error(f"unsupported {key} '{layer.param(key, default)}' (supported: {', '.join(choices)})", key)
    return value


def _flag(layer, key, default):
    value = layer.param(key, default)
    if value not in (True, False, 0, 1):
        raise layer.error(f"{key} must be true or false, got {value!r}", key)
    return bool(value)


# ---- BitShift, Bitwise ------------------------------------------------------------------
def bitshift(layer, xs, infos):
    direction = _choice(layer, "direction", ("LEFT", "RIGHT"))
    count_inputs(layer, xs, 2)
    x, s = _integers_of(layer, xs, infos)
    s = s.astype(np.int64)
    if direction == "LEFT":
        y = np.left_shift(x, s) & ((1 << infos[0].dtype.bits) - 1)
    else:
        y = np.right_shift(x, s)
    return [_fit(layer, y.astype(x.dtype))]


BITWISE = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}


def bitwise(layer, xs, infos):
    method = _choice(layer, "method", tuple(BITWISE) + ("NOT",))
    count_inputs(layer, xs, 1 if method == "NOT" else 2)
    args = _integers_of(layer, xs, infos)
    y = np.bitwise_not(args[0]) if method == "NOT" else BITWISE[method](*args)
    return [_fit(layer, y.astype(layer.top_types[0].name) if layer.top_types[0].is_int else y)]


# ---- Mod, DivMod --------------------------------------------------------------------------
def _fmod(layer):
    return _flag(layer, "fmod", False)


def mod_float(layer, xs, infos):
    fmod = _fmod(layer)
    count_inputs(layer, xs, 2)
    a, b = (x if x.dtype.kind == "f" else x.astype(np.float32) for x in xs)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.fmod(a, b) if fmod else a - np.floor_divide(a, b) * b
    return [_fit(layer, r)]


def mod_int(layer, xs, infos):
    fmod = _fmod(layer)
    count_inputs(layer, xs, 2)
    m, s = two_rescales(layer)
    a, b = (requantize(layer, shifted(x, info, layer), m[i], s[i], 0, info.qmin, info.qmax)
            for i, (x, info) in enumerate(zip(xs, infos)))
    b = np.where(b == 0, 1, b)
    r = np.fmod(a, b) if fmod else np.mod(a, b)
    zp, lo, hi = top_bounds(layer)
    return [np.clip(r - zp, lo, hi)]


def divmod_forward(layer, xs, infos):
    mode = _choice(layer, "mode", ("FLOOR", "TRUNC"), "FLOOR")
    count_inputs(layer, xs, 2)
    if len(layer.tops) != 2:
        raise layer.error(f"gives 2 tops (quotient, remainder), the IR has {len(layer.tops)}", "layer_top")
    a, b = (np.trunc(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64) for x in xs)
    a, b = np.broadcast_arrays(a, b)
    divisor = np.where(b == 0, 1, b)
    if mode == "FLOOR":
        q = np.floor_divide(a, divisor)
    else:
        q = np.abs(a) // np.abs(divisor) * np.where((a < 0) != (divisor < 0), -1, 1)
    q = np.where(b == 0, 0, q)
    return [_fit(layer, q, 0), _fit(layer, np.where(b == 0, 0, a - b * q), 1)]


# ---- IsInf, IsNaN ---------------------------------------------------------------------------
def _one_input(layer, xs):
    if len(xs) != 1 or len(layer.tops) != 1:
        raise layer.error(f"takes 1 input and 1 output, the IR gives {len(xs)} and {len(layer.tops)}", "layer_bottom")
    return np.asarray(xs[0])


def isinf(layer, xs, infos):
    positive, negative = _flag(layer, "detect_positive", True), _flag(layer, "detect_negative", True)
    x = _one_input(layer, xs)
    if x.dtype.kind != "f":
        return [np.zeros(x.shape, np.int64)]
    return [_fit(layer, (positive & (x == np.inf)) | (negative & (x == -np.inf)))]


def isnan(layer, xs, infos):
    x = _one_input(layer, xs)
    return [_fit(layer, np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool))]


# ---- CTCGreedyDecoder ------------------------------------------------------------------------
def ctc_greedy(layer, xs, infos):
    merge = _flag(layer, "merge_repeated", True)
    if len(xs) != 2:
        raise layer.error(f"takes 2 inputs (scores, sequence lengths), the IR gives {len(xs)}", "layer_bottom")
    scores, lengths = np.asarray(xs[0]), np.asarray(xs[1]).reshape(-1)
    shape = list(layer.top_shapes[0])
    if scores.ndim != 3 or len(shape) != 4 or shape[2:] != [1, 1] or shape[1] < scores.shape[1] \
            or lengths.size not in (1, scores.shape[0]):
        raise layer.error(f"scores {list(scores.shape)}, {lengths.size} sequence lengths and the top {shape} do "
                          f"not fit [batch, time, classes], one length a sample, [batch, N >= time, 1, 1]",
                          "layer_top_shape")
    batch, steps, classes = scores.shape
    out = np.full((batch, shape[1]), layer.top_types[0].qmax, np.int64)
    for n in range(batch):
        length = int(lengths[n if lengths.size > 1 else 0])
        length = steps if length <= 0 else min(length, steps)
        labels, previous = [], None
        for c in np.argmax(scores[n, :length], axis=-1):
            if not (merge and c == previous) and c != classes - 1:
                labels.append(c)
            previous = c
        out[n, :len(labels)] = labels
    return [out.reshape(batch, shape[1], 1, 1)]


FLOAT = {"BitShift": bitshift, "Bitwise": bitwise, "Mod": mod_float, "DivMod": divmod_forward, "IsInf": isinf,
         "IsNaN": isnan, "CTCGreedyDecoder": ctc_greedy}
INT = {**FLOAT, "Mod": mod_int}
