"""The Activation layer, and the float activation functions that float layers
(mixed precision) apply, fused (`with_activation`) or alone."""
import math

import numpy as np

from ..intmath import lut_lookup, saturate
from .stage import CLAMPS, activation_of, multiplier, output_stage, shifted

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def _gelu(layer, x):
    x64 = x.astype(np.float64)
    if str(layer.param("approximate", "none")).lower() == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))
    return y.astype(np.float32)


FLOAT_ACTIVATIONS = {
    "NONE": lambda layer, x: x,
    "RELU": lambda layer, x: np.maximum(x, np.float32(0)),
    "RELU6": lambda layer, x: np.clip(x, np.float32(0), np.float32(6)),
    "CLIP": lambda layer, x: np.clip(x, np.float32(layer.param("clip_min")), np.float32(layer.param("clip_max"))),
    "LEAKYRELU": lambda layer, x: np.where(x >= 0, x, x * np.float32(layer.param("negative_slope_value", 0.01))),
    "SIGMOID": lambda layer, x: _sigmoid(x),
    "TANH": lambda layer, x: np.tanh(x),
    "SWISH": lambda layer, x: x * _sigmoid(x),
    "SILU": lambda layer, x: x * _sigmoid(x),
    "HARDSIGMOID": lambda layer, x: np.clip(x * np.float32(layer.param("alpha", 1 / 6))
                                            + np.float32(layer.param("beta", 0.5)), np.float32(0), np.float32(1)),
    "HARDSWISH": lambda layer, x: x * np.clip(x + np.float32(3), np.float32(0), np.float32(6)) / np.float32(6),
    "GELU": _gelu,
}


def float_activation(layer, x: np.ndarray, method, key: str) -> np.ndarray:
    fn = FLOAT_ACTIVATIONS.get(str(method).upper())
    if fn is None:
        raise layer.error(f"unsupported {key} '{method}' (npuopt-run knows: {', '.join(FLOAT_ACTIVATIONS)})", key)
    return fn(layer, x).astype(np.float32)


def fused_float(layer, x: np.ndarray) -> np.ndarray:
    return float_activation(layer, x, layer.param("with_activation", "NONE"), "with_activation")


def activation_float(layer, xs, infos):
    return [float_activation(layer, xs[0], layer.param("method"), "method")]


LUT_METHODS = ("SIGMOID", "TANH", "SWISH", "SILU", "HARDSIGMOID", "HARDSWISH", "GELU")


def activation_int(layer, xs, infos):
    """RELU/RELU6/CLIP/LEAKYRELU: the output stage on z = A. The others: the
    interpolated table lookup of `lut`, clamped to the top's dtype."""
    method = str(layer.param("method")).upper()
    if method in LUT_METHODS:
        q_in = infos[0].dtype
        y = lut_lookup(layer, xs[0], layer.const("lut"), q_in.qmin, q_in.bits)
        out = layer.top_types[0]
        return [saturate(y, out.qmin, out.qmax)]
    if method not in CLAMPS + ("LEAKYRELU",):
        raise layer.error(f"unsupported integer Activation method '{method}' (npuopt-run knows: "
                          f"{', '.join(CLAMPS + ('LEAKYRELU',) + LUT_METHODS)})", "method")
    z = shifted(xs[0], infos[0], layer)
    return [output_stage(layer, z, *multiplier(layer, z.shape[-1]), activation_of(layer, "method"))]


FLOAT = {"Activation": activation_float}
INT = {"Activation": activation_int}
