"""Eltwise and BatchNorm."""
import numpy as np

from ..intmath import absmax, check_range, requantize
from .activation import fused_float
from .stage import (along, biases_with_zp, fused_method, output_stage, rescale, shifted, stored_ints,
                    weights_with_zp)

_FLOAT_ELTWISE = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


def eltwise_method(layer, xs) -> str:
    method = str(layer.param("method")).upper()
    if method not in _FLOAT_ELTWISE:
        raise layer.error(f"unsupported Eltwise method '{method}' ({', '.join(_FLOAT_ELTWISE)})", "method")
    if len(xs) != 2:
        raise layer.error(f"Eltwise takes 2 inputs, the IR gives {len(xs)}", "layer_bottom")
    return method


def eltwise_float(layer, xs, infos):
    out = _FLOAT_ELTWISE[eltwise_method(layer, xs)](xs[0], xs[1])
    return [fused_float(layer, out)]


_INT_COMBINE = {"ADD": np.add, "SUB": np.subtract, "MAX": np.maximum, "MIN": np.minimum}
BRANCH_BOUND = 1 << 31  # each scaled input is clamped to [-2^31, 2^31]


def eltwise_int(layer, xs, infos):
    """A = q_a + zp_a, B = q_b + zp_b. ADD/SUB/MAX/MIN: with `scale_value = [M_out, M_a, M_b]`,
    z = op(clamp(A * M_a), clamp(B * M_b)), then the output stage with M_out and `shift_value`.
    MUL: z = A * B, then the output stage with `scale_value`/`shift_value`."""
    method = eltwise_method(layer, xs)
    a, b = (shifted(x, info, layer) for x, info in zip(xs, infos))
    activation = fused_method(layer)
    if method == "MUL":
        check_range(layer, absmax(a) * absmax(b), "the product A*B")
        z = a * b
        return [output_stage(layer, z, activation, *rescale(layer, z.shape[-1]))]
    scales = np.asarray(stored_ints(layer, "scale", "scale_value"))
    shift = stored_ints(layer, "shift", "shift_value")
    if scales.ndim == 0 or scales.shape[0] != 3:
        raise layer.error(f"scale_value must be [M_out, M_a, M_b], got {scales.tolist()}", "scale_value")
    a, b = (requantize(layer, v, m, 0, 0, -BRANCH_BOUND, BRANCH_BOUND) for v, m in ((a, scales[1]), (b, scales[2])))
    return [output_stage(layer, _INT_COMBINE[method](a, b), activation, scales[0], shift)]


def batchnorm_axis(layer, x) -> int:
    axis = int(layer.param("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise layer.error(f"axis {axis} of a {x.ndim}-D input", "axis")
    return axis % x.ndim


def batchnorm_float(layer, xs, infos):
    x = xs[0]
    axis = batchnorm_axis(layer, x)
    w = layer.const("weights").astype(np.float32).ravel()
    b = layer.const("biases").astype(np.float32).ravel()
    return [fused_float(layer, (x * along(w, axis, x.ndim) + along(b, axis, x.ndim)))]


def batchnorm_int(layer, xs, infos):
    """With the channel axis moved last: acc = fl32(fl32(q * W) + fl32(B)) (in float32, as
    the tool chain computes it: exact while |acc| < 2^24), W = weights + weights_zp,
    B = biases + biases_zp (the input zero point folded in); then the output stage with
    per-channel numbers along `axis`."""
    q = xs[0]
    axis = batchnorm_axis(layer, q)
    channels = q.shape[axis]
    w = weights_with_zp(layer).reshape(-1)
    if w.size not in (1, channels):
        raise layer.error(f"weights of {w.size} values for axis {axis} of size {channels}", "weights_shape")
    product = (np.moveaxis(q, axis, -1) * w).astype(np.float32)
    acc = product + np.asarray(biases_with_zp(layer, channels)).astype(np.float32)
    y = output_stage(layer, acc.astype(np.int64), fused_method(layer), *rescale(layer, channels))
    return [np.moveaxis(y, -1, axis)]


FLOAT = {"Eltwise": eltwise_float, "BatchNorm": batchnorm_float}
INT = {"Eltwise": eltwise_int, "BatchNorm": batchnorm_int}
