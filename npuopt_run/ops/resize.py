"""Resize of H and W (NHWC) to the top shape, NEAREST or BILINEAR (docs/ir-ops.md).

The source coordinate c of output index i (size inputs, out outputs along the axis) is
computed in float64 in the tool chain's order of operations; r = ratio_y/ratio_x when the
IR gives them, in the float forward only (the integer forward always uses size / out):
  HALF_PIXEL            (i + 0.5) * (1 / r) - 0.5, or (i + 0.5) * size / out - 0.5
  PYTORCH_HALF_PIXEL    the same, 0 when out == 1
  ALIGN_CORNERS         i * (size - 1) / (out - 1), 0 when out == 1
  ASYMMETRIC            i * (1 / r), or i * size / out
  TF_HALF_PIXEL_FOR_NN  (i + 0.5) * (1 / r), or (i + 0.5) * size / out
  HALF_PIXEL_SYMMETRIC  size / 2 * (1 - out / (size * r)) + (i + 0.5) * (1 / r) - 0.5,
                        or (i + 0.5) * size / out - 0.5

NEAREST takes the input at nearest_mode(c), clamped to [0, size - 1]; the integer form
copies q (clamped to the top range). BILINEAR: c0 = max(floor c, 0), c1 = min(ceil c,
size - 1), per-axis weights 1 - (c - c0) and c - c0, their products W (float64); the
integer form (on q) takes F = interp_shift_value, W = floor(W * 2^F + 1/2) (F > 0) and
out = clamp(round_half_even((in00 W00 + in01 W01 + in10 W10 + in11 W11) / 2^F)), all
exact integers.
"""
import numpy as np

from ..intmath import absmax, check_range, shift_round_even
from .stage import int_param

METHODS = ("NEAREST", "BILINEAR")
MODES = ("HALF_PIXEL", "ALIGN_CORNERS", "ASYMMETRIC", "PYTORCH_HALF_PIXEL", "TF_HALF_PIXEL_FOR_NN",
         "HALF_PIXEL_SYMMETRIC")
NEAREST_MODES = ("ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL", "SIMPLE")
MAX_INTERP_SHIFT = 30


def _choice(layer, key, choices, default=None):
    value = str(layer.param(key) if default is None else layer.param(key, default)).upper()
    if value not in choices:
        raise layer.error(f"unsupported Resize {key} '{value}' ({', '.join(choices)})", key)
    return value


def _ratio(layer, key):
    value = layer.param(key, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise layer.error(f"{key} must be a positive number, got {value!r}", key)
    return float(value)


def source(mode: str, out: int, size: int, r) -> np.ndarray:
    i = np.arange(out, dtype=np.float64)
    if mode == "ALIGN_CORNERS":
        return i * 0.0 if out == 1 else i * (size - 1) / (out - 1)
    if mode == "PYTORCH_HALF_PIXEL" and out <= 1:
        return i * 0.0
    if mode == "ASYMMETRIC":
        return i * (1.0 / r) if r is not None else i * size / out
    if mode == "TF_HALF_PIXEL_FOR_NN":
        return (i + 0.5) * (1.0 / r) if r is not None else (i + 0.5) * size / out
    if mode == "HALF_PIXEL_SYMMETRIC" and r is not None:
        return size / 2.0 * (1.0 - out / (size * r)) + (i + 0.5) * (1.0 / r) - 0.5
    return (i + 0.5) * (1.0 / r) - 0.5 if r is not None else (i + 0.5) * size / out - 0.5


def nearest(c: np.ndarray, nearest_mode: str, size: int, downsampling: bool) -> np.ndarray:
    if nearest_mode == "ROUND_PREFER_FLOOR":  # halves k + 1/2 (k = trunc c) go down, else ties to even
        index = np.where(c == np.trunc(c) + 0.5, np.floor(c), np.rint(c))
    elif nearest_mode == "ROUND_PREFER_CEIL":
        index = np.floor(c + 0.5)
    elif nearest_mode == "FLOOR":
        index = np.floor(c)
    elif nearest_mode == "CEIL":
        index = np.ceil(c)
    else:  # SIMPLE
        index = np.ceil(c) if downsampling else np.trunc(c)
    return np.clip(index.astype(np.int64), 0, size - 1)


def _taps(layer, c: np.ndarray, size: int):
    """(c0, c1, weight of c0, weight of c1) along one axis."""
    c0 = np.maximum(np.floor(c), 0.0)
    c1 = np.minimum(np.ceil(c), size - 1.0)
    if c.size and (c0.max() > size - 1 or c1.min() < 0):
        raise layer.error(f"source coordinates {c.min()}..{c.max()} fall outside an axis of {size} "
                          f"(ratio_x/ratio_y do not fit the shapes)", "ratio_x")
    w1 = c - c0
    return c0.astype(np.int64), c1.astype(np.int64), 1.0 - w1, w1


def bilinear(layer, x: np.ndarray, ys, xs, shift: int) -> np.ndarray:
    """The sum of the four weighted taps (float64 weights; integer when shift > 0)."""
    h, w = x.shape[1], x.shape[2]
    y0, y1, wy0, wy1 = _taps(layer, ys, h)
    x0, x1, wx0, wx1 = _taps(layer, xs, w)
    one = float(1 << shift)

    def weight(a, b):
        wgt = (a.reshape(-1, 1) * b.reshape(1, -1) * one)[None, :, :, None]
        return np.floor(wgt + 0.5).astype(np.int64) if shift else wgt

    rows0, rows1 = x[:, y0], x[:, y1]
    terms = [(rows0[:, :, x0], weight(wy0, wx0)), (rows0[:, :, x1], weight(wy0, wx1)),
             (rows1[:, :, x0], weight(wy1, wx0)), (rows1[:, :, x1], weight(wy1, wx1))]
    if shift:
        check_range(layer, 4 * absmax(x) * max(absmax(wt) for _, wt in terms), "the interpolation sum")
    total = terms[0][0] * terms[0][1]
    for v, wt in terms[1:]:
        total = total + v * wt
    return total


def _resize(layer, x: np.ndarray, integer: bool):
    top = layer.top_shapes[0]
    if x.ndim != 4 or len(top) != 4:
        raise layer.error(f"Resize takes an NHWC input and a 4-D top shape, got {list(x.shape)} and {list(top)}")
    if layer.param("antialias", False):
        raise layer.error("antialias=true is not supported", "antialias")
    method = _choice(layer, "method", METHODS)
    mode = _choice(layer, "mode", MODES, "HALF_PIXEL")
    (h, w), (oh, ow) = x.shape[1:3], (int(top[1]), int(top[2]))
    ry, rx = (None, None) if integer else (_ratio(layer, "ratio_y"), _ratio(layer, "ratio_x"))
    ys, xs = source(mode, oh, h, ry), source(mode, ow, w, rx)
    if method == "NEAREST":
        nearest_mode = _choice(layer, "nearest_mode", NEAREST_MODES, "ROUND_PREFER_FLOOR")
        return x[:, nearest(ys, nearest_mode, h, oh / h < 1)][:, :, nearest(xs, nearest_mode, w, ow / w < 1)]
    if not integer:
        return bilinear(layer, x.astype(np.float64), ys, xs, 0)
    shift = int_param(layer, "interp_shift_value")
    if not 0 <= shift <= MAX_INTERP_SHIFT:
        raise layer.error(f"interp_shift_value {shift} is outside [0, {MAX_INTERP_SHIFT}]", "interp_shift_value")
    total = bilinear(layer, x, ys, xs, shift)
    if shift:
        return shift_round_even(total, shift)
    return np.rint(total).astype(np.int64)


def resize_float(layer, xs, infos):
    return [_resize(layer, xs[0], False).astype(np.float32)]


def resize_int(layer, xs, infos):
    return [np.clip(_resize(layer, xs[0], True), *layer.top_range(0)).astype(np.int64)]


FLOAT = {"Resize": resize_float}
INT = {"Resize": resize_int}
