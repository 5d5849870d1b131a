"""Moments: the mean and the (population) variance of the input over `axis` (a list),
two tops; `keepdims` (default true) keeps the reduced axes with size 1.

Float as the tool chain: torch.std_mean in float32, the variance as std * std.

Quantized (docs/integer-semantics.md "Moments"): the mean top keeps the input's
quantization; x = (q * input_scale_value) >> input_shift_value (the tool chain writes
1 and 0), m = round(fl64 mean(x)), V = trunc(fl64 mean((x - m)^2)); the variance top
(unsigned) is R(V, var_scale_value, var_shift_value), for inputs wider than 8 bits
computed on V's two 16-bit halves (the tool chain's form)."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, multiplier_dtype
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _norm

HALF_BITS = 16      # wide inputs: V split as (V >> 16, V & 0xFFFF)
NARROW_BITS = 8


def moments_axes(node, ndim: int):
    return _norm.check_axes(node, node.get_param("axis"), ndim)


def keepdims(node) -> bool:
    value = node.get_param("keepdims", True)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value not in (True, False, 0, 1):
        raise IRError(f"layer '{node.name}' (Moments): keepdims {value!r} must be true or false")
    return bool(value)


def check_tops(node) -> None:
    if len(node.outputs) != 2:
        raise IRError(f"layer '{node.name}' (Moments): {len(node.outputs)} tops, it has 2 (mean, variance)")


def variance_integers(node, v: torch.Tensor, x_bits: int, var_t) -> torch.Tensor:
    """R(V, M, s) into the variance top; wider than 8 bits on V's 16-bit halves."""
    r = Rescale.read(node, "var_")
    m, s = r.multiplier, r.shift
    if x_bits <= NARROW_BITS:
        return qmath.requantize(v, m, s, var_t.zerop, var_t.qmin, var_t.qmax)
    lo, hi = qmath.integer_range(32, False)
    high = v >> HALF_BITS
    low = v - (high << HALF_BITS)
    high = qmath.requantize(high * m, 1, s - HALF_BITS, 0, lo, hi)
    low = qmath.requantize(low * m, 1, s, 0, lo, hi)
    return qmath.requantize(high + low, 1, 0, var_t.zerop, var_t.qmin, var_t.qmax)


@op_register(OpType.Moments, "1.0")
def moments_forward(self, *args):
    check_tops(self)
    x_t, mean_t, var_t = self.inputs[0], self.outputs[0], self.outputs[1]
    axes = moments_axes(self, x_t.betensor.dim())
    keep = keepdims(self)
    if not self.quantized:
        x = computing_float(x_t.betensor)
        mean = torch.mean(x, dim=axes, keepdim=True)
        var = torch.mean((x - mean) ** 2, dim=axes, keepdim=keep)
        mean_t.betensor, var_t.betensor = (mean if keep else mean.squeeze(tuple(axes))), var
        return mean_t.betensor, var_t.betensor
    r = Rescale.read(self, "input_")
    x = (x_t.betensor.to(torch.int64) * r.multiplier) >> r.shift
    mean = torch.round(torch.mean(x.to(torch.float64), dim=axes, keepdim=True)).to(torch.int64)
    v = torch.mean((x.to(torch.float64) - mean) ** 2, dim=axes, keepdim=True).to(torch.int64)
    if not keep:
        mean, v = mean.squeeze(axes), v.squeeze(axes)
    QT.store_output(self, mean, mean_t)
    QT.store_output(self, variance_integers(self, v, x_t.qbits, var_t), var_t)
    return mean_t.betensor, var_t.betensor


@quant_register(OpType.Moments, "1.0")
def moments_quantize(self, *args):
    """The mean keeps the input's quantization; the variance top unsigned from its
    calibrated range, its rescale s_var / s_in^2."""
    check_tops(self)
    x_t = _norm.check_input(self)
    mean_t, var_t = self.outputs
    QT.copy_quantization(x_t, mean_t)
    QT.quantize_activation(self, var_t, signed=False)
    st = settings_of(self)
    Rescale.from_ratio(var_t.scale / (x_t.scale * x_t.scale), st.multiplier_bits).write(self, "var_")
    Rescale(1, 0, multiplier_dtype(st.activation_bits), Dtype.INT8).write(self, "input_")
