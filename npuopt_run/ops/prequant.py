"""The layers of pre-quantized sources: ConvInteger, MatMulInteger (integer products with
zero points, an int32 top) and FakeQuantWithMinMaxVars.

ConvInteger, float: sum over each window of (x - x_zero_point) * (w - w_zero_point) +
biases, the pads a shifted zero. Integers: the input's zero point (-x_zero_point in the
tool chain's form) pads it, W = weights + weights_zp, B = biases + biases_zp (which hold
the fold of x_zero_point), acc = sum x' * W + B, clamped to the top's range; no rescale.

MatMulInteger, in float and integers alike: (A - a_zero_point) @ (B - b_zero_point)
exactly, the params' zero points (the tool chain's forward reads them in both), clamped
to the top's range.

FakeQuantWithMinMaxVars, float (float32 throughout, the tool chain's order of
operations): [min, max] moved to hold zero (min > 0: [0, max - min]; max < 0: [min - max,
0]; else min' = s * round(min / s), s = (max - min) / (2^bits - 1), max' = max + min' - min),
scale = (2^bits - 1) / (max' - min') (that span when it is below float32's epsilon), zero
point round(scale * min') within +-(2^(bits-1) - 1), q = round(scale * x - zp) in [1 or 0,
2^bits - 1], then (q + zp) * (1 / scale) clamped to [min', max']. Integers: the input
unchanged (the top shares its quantization)."""
import numpy as np

from ..intmath import exact_matmul
from .conv import check_weights, grouped_conv, nd_windows, window
from .stage import biases_with_zp, int_param, same_quantization, top_bounds, weights_with_zp


def _zero_point(layer, key: str) -> int:
    return int_param(layer, key)


def _single(layer, xs, count: int):
    if len(xs) != count:
        raise layer.error(f"takes {count} input(s), the IR gives {len(xs)}", "layer_bottom")
    return xs


def _int32(layer, acc: np.ndarray, integer: bool) -> np.ndarray:
    lo, hi = top_bounds(layer)[1:] if integer else (-(1 << 31), (1 << 31) - 1)
    return np.clip(acc, lo, hi).astype(np.int64)


def _conv(layer, x: np.ndarray, w: np.ndarray, pad: int, integer: bool) -> np.ndarray:
    win = window(layer, 2)
    channels = check_weights(layer, x, w, win, False)
    acc = grouped_conv(nd_windows(x.astype(np.int64), win, np.int64(pad)), w.astype(np.int64), win["group"],
                       lambda p, k: exact_matmul(layer, p, k))
    b = biases_with_zp(layer, channels) if integer else \
        (layer.const("biases").astype(np.int64).reshape(-1) if layer.has_const("biases") else np.int64(0))
    return _int32(layer, acc + b, integer)


def convinteger_float(layer, xs, infos):
    (x,) = _single(layer, xs, 1)
    x = np.rint(x).astype(np.int64) - _zero_point(layer, "x_zero_point")
    w = layer.const("weights").astype(np.int64) - _zero_point(layer, "w_zero_point")
    return [_conv(layer, x, w, 0, False)]


def convinteger_int(layer, xs, infos):
    (q,) = _single(layer, xs, 1)
    _, zp_x = infos[0].quant(layer)
    return [_conv(layer, q, weights_with_zp(layer), -int(zp_x), True)]


def _matmul(layer, xs, integer: bool):
    a, b = (np.rint(x).astype(np.int64) for x in _single(layer, xs, 2))
    a, b = a - _zero_point(layer, "a_zero_point"), b - _zero_point(layer, "b_zero_point")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise layer.error(f"inputs {list(a.shape)} and {list(b.shape)} do not fit a matrix product")
    return [_int32(layer, exact_matmul(layer, a, b), integer)]


def matmulinteger_float(layer, xs, infos):
    return _matmul(layer, xs, False)


def matmulinteger_int(layer, xs, infos):
    return _matmul(layer, xs, True)


def _fake_quant_params(layer):
    lo, hi = (layer.param(k) for k in ("min", "max"))
    for key, v in (("min", lo), ("max", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise layer.error(f"'{key}' must be a number, got {v!r}", key)
    bits = int_param(layer, "num_bits", 8)
    if lo > hi or not 2 <= bits <= 16:
        raise layer.error(f"min {lo}, max {hi}, num_bits {bits}: needs min <= max and 2 <= num_bits <= 16", "min")
    narrow = layer.param("narrow_range", False)
    if narrow not in (0, 1):
        raise layer.error(f"narrow_range must be true or false, got {narrow!r}", "narrow_range")
    return np.float32(lo), np.float32(hi), bits, bool(narrow)


def _moved_range(lo, hi, bits: int):
    """The range moved to hold zero, as float32 values."""
    zero = np.float32(0)
    if lo > 0:
        return zero, np.float32(hi - lo)
    if hi < 0:
        return np.float32(lo - hi), zero
    step = np.float32(np.float32(hi - lo) / np.float32((1 << bits) - 1))
    low = np.float32(step * np.rint(np.float32(lo / step)))
    return low, np.float32(np.float32(hi + low) - lo)


def fakequant_float(layer, xs, infos):
    (x,) = _single(layer, xs, 1)
    lo, hi, bits, narrow = _fake_quant_params(layer)
    low, high = _moved_range(lo, hi, bits)
    levels = np.float32((1 << bits) - 1)
    span = np.float32(high - low)
    if not span >= np.finfo(np.float32).eps:  # NaN too
        span = levels
    scale = np.float32(levels / span)
    limit = (1 << (bits - 1)) - 1
    zp = np.float32(np.clip(np.rint(np.float32(scale * low)), -limit, limit))
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint(np.float32(scale) * x.astype(np.float32) - zp)
    q = np.clip(q, np.float32(1 if narrow else 0), levels)
    q = np.where(np.isnan(q), np.float32(0), q).astype(np.float32)
    y = (q + zp) * np.float32(np.float32(1) / scale)
    return [np.clip(y, low, high).astype(np.float32)]


def fakequant_int(layer, xs, infos):
    (q,) = _single(layer, xs, 1)
    same_quantization(layer, infos[0])
    return [q]


READS_INTEGERS = ("ConvInteger", "MatMulInteger")  # in float too: their inputs' integers as they are
FLOAT = {"ConvInteger": convinteger_float, "MatMulInteger": matmulinteger_float,
         "FakeQuantWithMinMaxVars": fakequant_float}
INT = {"ConvInteger": convinteger_int, "MatMulInteger": matmulinteger_int, "FakeQuantWithMinMaxVars": fakequant_int}
