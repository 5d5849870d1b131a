"""The Activation layer, and the float activation functions that float layers
(mixed precision) apply, fused (`with_activation`) or alone."""
import math

import numpy as np

from ..intmath import lut_lookup
from .stage import RESCALE_METHODS, method_of, output_stage, rescale, shifted

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _f(layer, key, default=None):
    """A float param; required when no default is given."""
    return float(layer.param(key) if default is None else layer.param(key, default))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(layer, x):
    if str(layer.param("approximate", "none")).lower() == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _prelu(layer, x):
    slope = layer.const("negative_slope").astype(np.float64)
    if slope.ndim >= x.ndim and slope.shape[0] == 1:
        slope = slope[0]
    return np.where(x >= 0, x, x * slope)


def _shrink(layer, x):
    lambd, bias = _f(layer, "lambd", 0.5), _f(layer, "bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0.0))


# computed in float64 and rounded to float32 once: float layers agree with npuopt's
# float32 forward to rounding only (the op tests compare them with a tolerance)
FLOAT_ACTIVATIONS = {
    "NONE": lambda layer, x: x,
    "RELU": lambda layer, x: np.maximum(x, 0.0),
    "RELU6": lambda layer, x: np.clip(x, 0.0, 6.0),
    "CLIP": lambda layer, x: np.clip(x, _f(layer, "clip_min"), _f(layer, "clip_max")),
    "LEAKYRELU": lambda layer, x: np.where(x >= 0, x, x * _f(layer, "negative_slope_value", 0.01)),
    "PRELU": _prelu,
    "SIGMOID": lambda layer, x: _sigmoid(x),
    "TANH": lambda layer, x: np.tanh(x),
    "TANH_ABS": lambda layer, x: np.abs(np.tanh(x)),
    "SWISH": lambda layer, x: x * _sigmoid(_f(layer, "alpha", 1.0) * x),
    "SILU": lambda layer, x: x * _sigmoid(x),
    "HARDSIGMOID": lambda layer, x: np.clip(x * _f(layer, "alpha", 1 / 6) + _f(layer, "beta", 0.5),
                                            _f(layer, "clip_min", 0.0), _f(layer, "clip_max", 1.0)),
    "HARDSWISH": lambda layer, x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "GELU": _gelu,
    "ELU": lambda layer, x: _elu(x, _f(layer, "alpha", 1.0)),
    "CELU": lambda layer, x: np.maximum(x, 0) + np.minimum(0, _f(layer, "alpha", 1.0)
                                                           * np.expm1(np.minimum(x, 0) / _f(layer, "alpha", 1.0))),
    "SELU": lambda layer, x: _f(layer, "gamma", 1.0507009873554805) * _elu(x, _f(layer, "alpha", 1.6732632423543772)),
    "MISH": lambda layer, x: x * np.tanh(np.logaddexp(0.0, x)),
    "SOFTPLUS": lambda layer, x: np.logaddexp(0.0, x),
    "SOFTSIGN": lambda layer, x: x / (1.0 + np.abs(x)),
    "SHRINK": _shrink,
    "THRESHOLDEDRELU": lambda layer, x: np.where(x > _f(layer, "alpha", 1.0), x, 0.0),
}


def float_activation(layer, x: np.ndarray, method, key: str) -> np.ndarray:
    fn = FLOAT_ACTIVATIONS.get(str(method).upper())
    if fn is None:
        raise layer.error(f"unsupported {key} '{method}' (npuopt-run knows: {', '.join(FLOAT_ACTIVATIONS)})", key)
    return np.asarray(fn(layer, x.astype(np.float64)), np.float32)


def fused_float(layer, x: np.ndarray) -> np.ndarray:
    return float_activation(layer, x, layer.param("with_activation", "NONE"), "with_activation")


def activation_float(layer, xs, infos):
    return [float_activation(layer, xs[0], layer.param("method"), "method")]


def lut_index_base(info) -> int:
    """The input code of a table's first entry: the input's qmin, or one below it for a
    signed input with a restricted (symmetric) range, whose table still spans 2^bits codes."""
    return info.qmin - 1 if info.dtype.signed and -info.qmin == info.qmax else info.qmin


def activation_int(layer, xs, infos):
    """RELU/RELU6/CLIP/LEAKYRELU/PRELU: the output stage on A = q + zp_in with the layer's
    rescale. Every other method: the table `lut` indexed by q - lut_index_base, interpolated
    between entries, clamped to the table dtype's range."""
    method = method_of(layer, "method")
    info = infos[0]
    if method in RESCALE_METHODS:
        a = shifted(xs[0], info, layer)
        return [output_stage(layer, a, method, *rescale(layer, a.shape[-1]))]
    if method == "NONE":
        raise layer.error("Activation method NONE has no integer form", "method")
    table_type = layer.const_types.get("lut")
    if table_type is None or not table_type.is_int:
        raise layer.error(f"integer Activation '{method}' needs an integer constant 'lut'", "method")
    out = lut_lookup(layer, xs[0] - lut_index_base(info), layer.const("lut"), info.dtype.bits,
                     table_type.qmin, table_type.qmax)
    return [out]


FLOAT = {"Activation": activation_float}
INT = {"Activation": activation_int}
