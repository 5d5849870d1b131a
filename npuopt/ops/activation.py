"""Activation layers, and the fused activation (`with_activation`) that Convolution,
FullyConnected, Eltwise and others apply to their accumulator.

Quantized (the tool chain's arithmetic, docs/integer-semantics.md):
* RELU/RELU6/CLIP/LEAKYRELU/PRELU rescale A = q + zp_in with the layer's
  multiplier/shift; CLIP keeps integer bounds `clip_min/clip_max` on a
  2^8-finer intermediate for 8-bit outputs, LEAKYRELU an integer slope
  `negative_slope_value` with `negative_slope_shift`, PRELU an int16 constant
  `negative_slope` with `negative_slope_shift`;
* every other method is a lookup table `lut` indexed by the input integer.
"""
import math

import torch
import torch.nn.functional as F

from ..dtype import Dtype
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register

INT48_MIN, INT48_MAX = -(1 << 47), (1 << 47) - 1


def _p(node, key, default=None):
    """A float param; required when no default is given."""
    return float(node.get_param(key) if default is None else node.get_param(key, default))


def _clip(node, x):
    return torch.clamp(x, _p(node, "clip_min"), _p(node, "clip_max"))


def _leaky(node, x):
    return F.leaky_relu(x, _p(node, "negative_slope_value", 0.01))


def prelu_slopes(node, x: torch.Tensor) -> torch.Tensor:
    """The negative_slope constant shaped to broadcast against x (a leading batch axis dropped)."""
    slope = node.get_constant("negative_slope").betensor.to(x.dtype)
    return slope.squeeze(0) if slope.dim() >= x.dim() and slope.shape[0] == 1 else slope


def _prelu(node, x):
    return torch.where(x >= 0, x, x * prelu_slopes(node, x))


def _gelu(node, x):
    approx = str(node.get_param("approximate", "NONE")).upper()
    if approx not in ("NONE", "TANH"):
        raise IRError(f"layer '{node.name}' ({node.type}): unsupported approximate '{approx}' (supported: NONE, TANH)")
    return F.gelu(x, approximate="tanh" if approx == "TANH" else "none")


def _hardsigmoid(node, x):
    y = x * _p(node, "alpha", 1 / 6) + _p(node, "beta", 0.5)
    return torch.clamp(y, _p(node, "clip_min", 0.0), _p(node, "clip_max", 1.0))


def _shrink(node, x):
    lambd, bias = _p(node, "lambd", 0.5), _p(node, "bias", 0.0)
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x)))


FLOAT_ACTIVATIONS = {
    "NONE": lambda node, x: x,
    "RELU": lambda node, x: F.relu(x),
    "RELU6": lambda node, x: F.relu6(x),
    "CLIP": _clip,
    "LEAKYRELU": _leaky,
    "PRELU": _prelu,
    "SIGMOID": lambda node, x: torch.sigmoid(x),
    "TANH": lambda node, x: torch.tanh(x),
    "TANH_ABS": lambda node, x: torch.tanh(x).abs(),
    "SWISH": lambda node, x: x * torch.sigmoid(_p(node, "alpha", 1.0) * x),
    "SILU": lambda node, x: F.silu(x),
    "HARDSIGMOID": _hardsigmoid,
    "HARDSWISH": lambda node, x: F.hardswish(x),
    "GELU": _gelu,
    "ELU": lambda node, x: F.elu(x, _p(node, "alpha", 1.0)),
    "CELU": lambda node, x: F.celu(x, _p(node, "alpha", 1.0)),
    "SELU": lambda node, x: _p(node, "gamma", 1.0507009873554805) * F.elu(x, _p(node, "alpha", 1.6732632423543772)),
    "MISH": lambda node, x: F.mish(x),
    "SOFTPLUS": lambda node, x: F.softplus(x),
    "SOFTSIGN": lambda node, x: F.softsign(x),
    "SHRINK": _shrink,
    "THRESHOLDEDRELU": lambda node, x: torch.where(x > _p(node, "alpha", 1.0), x, torch.zeros_like(x)),
}

# what a layer may fuse as with_activation, and how the tool chain computes each in integers
RESCALE_METHODS = ("RELU", "RELU6", "CLIP", "LEAKYRELU", "PRELU")
FUSABLE = ("NONE",) + RESCALE_METHODS


def method_of(node, key: str = "method") -> str:
    method = str(node.get_param(key, "NONE")).upper()
    if method not in FLOAT_ACTIVATIONS:
        raise IRError(f"layer '{node.name}' ({node.type}): unsupported {key} '{method}' "
                      f"(supported: {', '.join(sorted(FLOAT_ACTIVATIONS))})")
    return method


def float_activation(node, x: torch.Tensor, method: str) -> torch.Tensor:
    return FLOAT_ACTIVATIONS[method](node, x)


def apply_fused_activation(node, x: torch.Tensor) -> torch.Tensor:
    """The float `with_activation` a Convolution, FullyConnected or Eltwise carries."""
    return float_activation(node, x, method_of(node, "with_activation"))


# ---- integer forms of the rescaling methods ---------------------------------------
def quantize_rescaling(node, method: str, out) -> None:
    """Integer params of a rescaling activation whose output `out` is quantized: CLIP
    bounds, LEAKYRELU slope, PRELU slopes (the rescale itself is the caller's)."""
    if method == "CLIP":
        lo, hi = _p(node, "clip_min"), _p(node, "clip_max")
        if lo > hi:
            raise IRError(f"layer '{node.name}' ({node.type}): clip_min {lo} > clip_max {hi}")
        # the bounds clamp x * scale * 2^relay before the zero point is applied
        finer = out.scale * (1 << clip_relay_bits(out))
        bounds = qmath.quantize(torch.tensor([lo, hi]), finer, 0, QT.INT32_MIN, QT.INT32_MAX)
        node.params["clip_min"], node.params["clip_max"] = int(bounds[0]), int(bounds[1])
    elif method == "LEAKYRELU":
        slope = _p(node, "negative_slope_value", 0.01)
        shift = slope_shift(abs(slope))
        value = int(round(slope * (1 << shift)))
        node.params["negative_slope_value"] = value
        node.params["negative_slope_type"] = Dtype.integer(max(8, value.bit_length() + (value < 0)),
                                                           value < 0).value
        node.params["negative_slope_shift"] = shift
    elif method == "PRELU":
        c = node.get_constant("negative_slope")
        slope = c.betensor.detach().to(torch.float32)
        shift = slope_shift(float(slope.abs().max()))
        q = qmath.quantize(slope, float(1 << shift), 0, -32768, 32767)
        c.betensor, c.dtype, c.ir_shape = q.to(torch.int16), Dtype.INT16, tuple(q.shape)
        node.params["negative_slope_shift"] = shift


def slope_shift(magnitude: float) -> int:
    """The shift giving a slope of that magnitude 15 bits of precision (at most 31)."""
    if magnitude <= 0:
        return 15
    return max(0, min(31, 14 - math.floor(math.log2(magnitude))))


def clip_relay_bits(out) -> int:
    """CLIP on 8-bit outputs clamps a value 2^8 finer than the output, then rescales it."""
    return 8 if out.qbits <= 8 else 0


def rescaling_forward(node, method: str, x: torch.Tensor, rescale: Rescale, out, owned: bool = False) -> torch.Tensor:
    """The tool chain's integer activation on x (input integers with their zero point
    added, or an accumulator), rescaled into `out`'s quantization (float64 integers).
    `owned`: x is a float64 tensor the caller gives up, used in place."""
    zp, lo, hi = out.zerop, out.qmin, out.qmax
    m, s = rescale.multiplier, rescale.shift
    owned = owned and x.dtype == torch.float64
    if method == "NONE":
        return qmath.requantize(x, m, s, zp, lo, hi, out=x if owned else None)
    if method == "RELU":  # taken through float32, as the tool chain does
        return qmath.requantize(torch.relu_(x.to(torch.float32, copy=True)), m, s, zp, lo, hi)
    if method == "RELU6":
        x = torch.relu_(x) if owned else torch.relu(x)
        return qmath.requantize(x, m, s, zp, lo, hi, out=x if owned else None)
    if method == "CLIP":
        relay = clip_relay_bits(out)
        y = qmath.requantize(x, m, s - relay, 0, int(node.params["clip_min"]), int(node.params["clip_max"]))
        return qmath.requantize(y, 1, relay, zp, lo, hi)
    lo48, hi48 = INT48_MIN, INT48_MAX
    if method == "LEAKYRELU":
        slope = int(node.get_param("negative_slope_value"))
        shift = int(node.get_param("negative_slope_shift", out.qbits))
    else:  # PRELU; its intermediate is clamped to the output's signedness at 48 bits
        slope = prelu_slopes(node, x.to(torch.float64))
        shift = int(node.get_param("negative_slope_shift"))
        if not out.dtype.is_signed:
            lo48, hi48 = 0, (1 << 48) - 1
    x = x.to(torch.float64)
    y = qmath.requantize(torch.clamp(x, max=0.0), slope, shift, -torch.clamp(x, min=0.0), lo48, hi48)
    return qmath.requantize(y, m, s, zp, lo, hi)


# ---- fused activations ------------------------------------------------------
def fused_method(node) -> str:
    method = method_of(node, "with_activation")
    if method not in FUSABLE:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): fused activation '{method}' has no integer "
                             f"form (the tool chain fuses {', '.join(FUSABLE)})")
    return method


def quantize_fused(node, out) -> None:
    """The fused activation's integer params, once `out` is quantized."""
    method = fused_method(node)
    if method != "NONE":
        quantize_rescaling(node, method, out)


def fused_forward(node, acc: torch.Tensor, rescale: Rescale, out, owned: bool = False) -> torch.Tensor:
    """Accumulator -> output integers: the fused activation and the rescale (`owned`:
    acc is a float64 tensor the caller gives up, used in place)."""
    return rescaling_forward(node, fused_method(node), acc, rescale, out, owned)


# ---- the Activation layer ------------------------------------------------------
def lut_index_base(t) -> int:
    """Code of a table's first entry: qmin, or one below it for a signed tensor with a
    restricted (symmetric) range, whose table still spans 2^bits codes."""
    return t.qmin - 1 if t.dtype.is_signed and -t.qmin == t.qmax else t.qmin


def build_lut(node, fn, inp, out, items_bits: int = None) -> torch.Tensor:
    """Table of 2^k entries (k = min(input bits, `items_bits` or lut_items_in_bits)) for the tool chain's
    lookup: index = q - base; with b = bits - k > 0 the output is
    lut[i] + ((lut[i+1] - lut[i]) * r) >> b (i = index >> b, r its low b bits, the last
    entry repeated past the end). With b = 0 entry i is fn at code base + i, quantized.
    With b > 0 the entries are the least-squares fit of that interpolation (floor
    included, on average) to fn over every input code, so the flat last segment and
    the curvature between samples cost as little as they can."""
    bits = inp.qbits
    k = min(bits, items_bits or settings_of(node).lut_items_in_bits)
    b = bits - k
    codes = lut_index_base(inp) + torch.arange(1 << bits, dtype=torch.float64)
    ideal = fn((codes + float(inp.zerop)) / float(inp.scale)).to(torch.float64) * float(out.scale) - float(out.zerop)
    ideal = torch.nan_to_num(ideal, nan=0.0, posinf=float(out.qmax), neginf=float(out.qmin))
    ideal = ideal.clamp(float(out.qmin), float(out.qmax))
    if b == 0:
        table = torch.round(ideal[: 1 << k])
    else:
        n = 1 << k
        d = torch.arange(1 << bits)
        i, r = d >> b, (d & ((1 << b) - 1)).to(torch.float64) / (1 << b)
        j = (i + 1).clamp(max=n - 1)
        # y = (1 - r) * lut[i] + r * lut[j] - 1/2 where the floor cuts a fraction: solve the
        # normal equations (tridiagonal, n x n) of that linear model against the ideal outputs
        target = ideal + 0.5 * (r > 0).to(torch.float64)
        gram = torch.zeros(n * n, dtype=torch.float64)
        gram.index_add_(0, i * n + i, (1 - r) ** 2)
        gram.index_add_(0, i * n + j, (1 - r) * r)
        gram.index_add_(0, j * n + i, (1 - r) * r)
        gram.index_add_(0, j * n + j, r ** 2)
        rhs = torch.zeros(n, dtype=torch.float64)
        rhs.index_add_(0, i, (1 - r) * target)
        rhs.index_add_(0, j, r * target)
        table = torch.round(torch.linalg.solve(gram.reshape(n, n), rhs))
    return table.clamp(float(out.qmin), float(out.qmax))


def lut_forward(node, inp, out) -> torch.Tensor:
    table, dtype = fields.read_lut(node)
    index = inp.betensor.to(torch.int64) - lut_index_base(inp)
    return qmath.lut_lookup(index, table, inp.qbits, dtype.bits, dtype.is_signed)


@quant_register(OpType.Activation, "1.0")
def activation_quantize(self, *args):
    method = method_of(self)
    if method == "NONE":
        raise QT.Unsupported(f"layer '{self.name}': activation 'NONE' has no integer form")
    QT.check_quantized_inputs(self)
    inp, out = self.inputs[0], self.outputs[0]
    QT.quantize_activation(self, out)
    if method in RESCALE_METHODS:
        Rescale.from_ratio(out.scale / inp.scale, settings_of(self).multiplier_bits).write(self)
        quantize_rescaling(self, method, out)
        return
    fields.write_lut(self, build_lut(self, lambda x: float_activation(self, x, method), inp, out), out.dtype)


@op_register(OpType.Activation, "1.0")
def activation_forward(self, *args):
    method = method_of(self)
    inp, out = self.inputs[0], self.outputs[0]
    if not self.quantized:
        out.betensor = float_activation(self, inp.betensor, method)
        return out.betensor
    if method in RESCALE_METHODS:
        y = rescaling_forward(self, method, QT.shifted(inp), Rescale.read(self), out)
    else:
        y = lut_forward(self, inp, out)
    return QT.store_output(self, y, out)
