"""What LayerNorm, GroupNorm, InstanceNorm, MVN and RMSNorm share: the tool chain computes
them as one normalization of rows (mean, variance, inverse square root) followed by
weights * n + biases and a rescale (docs/integer-semantics.md, "LayerNorm"); the layer
types differ only in which elements form a row and along which axis the weights lie.

A `Layout` says that for one input shape: the input is viewed as `view` (GroupNorm
splits the channel axis into groups) and reduced over `axes` of that view; weights and
biases broadcast as `const_shape`, per-channel zero points and rescales as
`channel_shape` (both in the input's own dims).
"""
import math
from dataclasses import dataclass
from typing import List, Tuple

import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, Shift
from ..quant.settings import settings_of

NARROW_BITS = 8             # inputs up to 8 bits take the shifted-variance form
NORM_SHIFT_BASE = 8         # n = d * g * norm_scale >> (8 + norm_shift) for narrow inputs
WIDE_NORM_SHIFT = 7         # n = (d >> 1) * g >> 7 for wide inputs
SQRT_ROUND_SHIFT = 16       # g = (inverse_sqrt(V) + 2^15) >> 16
NORM_MULTIPLIER_BITS = 15
VARIANCE_HEADROOM_BITS = 4  # the tool chain's var_shift: ceil(log2 N) - 4, made even
G_MAX = (1 << 16) - 1       # g after its rescale is held in 16 unsigned bits
RMS_ROUND_SHIFT = 8         # RMSNorm: n = ((x + zp) * g + 2^7) >> 8


@dataclass
class Layout:
    view: Tuple[int, ...]
    axes: List[int]
    const_shape: List[int]
    channel_shape: List[int]

    @property
    def count(self) -> int:
        return math.prod(self.view[a] for a in self.axes)


def kept_shape(shape, keep) -> List[int]:
    """The shape with the axes `keep` kept and 1 elsewhere."""
    return [int(shape[d]) if d in keep else 1 for d in range(len(shape))]


def plain_layout(shape, axes, weight_axes, channel_axis: int) -> Layout:
    """Rows over `axes` of the input itself, weights along `weight_axes`."""
    return Layout(tuple(shape), list(axes), kept_shape(shape, weight_axes), kept_shape(shape, [channel_axis]))


def check_axes(node, axes, ndim: int, key: str = "axis"):
    """Axes (ints or a list) as sorted non-negative axes of an ndim-D input, or a one-line IRError."""
    axes = [axes] if isinstance(axes, int) else list(axes)
    if not axes or not all(isinstance(a, int) and -ndim <= a < ndim for a in axes):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} {node.get_param(key, axes)} must name axes "
                      f"of a {ndim}-D input")
    axes = sorted(a % ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} names an axis twice")
    return axes


def reshaped_constant(node, key: str, shape) -> torch.Tensor:
    value = node.get_constant(key).betensor
    if value.numel() != math.prod(shape):
        raise IRError(f"layer '{node.name}' ({node.type}): '{key}' has {value.numel()} values for "
                      f"{math.prod(shape)} elements {list(shape)}")
    return value.reshape(shape)


def check_constants(node, layout: Layout) -> None:
    for key in ("weights", "biases"):
        if key in node.constants:
            reshaped_constant(node, key, layout.const_shape)


def per_channel(v, channel_shape):
    """A zero point or rescale value: a number, or one per channel, shaped to broadcast
    against the input."""
    if isinstance(v, torch.Tensor):
        return v.reshape(channel_shape) if v.numel() > 1 else v.reshape(())
    return v


# ---- float ----------------------------------------------------------------------------
def normalized_float(x: torch.Tensor, layout: Layout, eps: float) -> torch.Tensor:
    """(x - mean) * (1 / (var + eps)^0.5) per row, in float32 as the tool chain."""
    shape = x.shape
    x = computing_float(x).reshape(layout.view)
    mean = torch.mean(x, dim=layout.axes, keepdim=True)
    var = torch.mean((x - mean) ** 2, dim=layout.axes, keepdim=True)
    return ((x - mean) * (1.0 / torch.pow(var + eps, 0.5))).reshape(shape)


def affine_float(node, y: torch.Tensor, layout: Layout) -> torch.Tensor:
    if "weights" in node.constants:
        y = reshaped_constant(node, "weights", layout.const_shape) * y
    if "biases" in node.constants:
        y = y + reshaped_constant(node, "biases", layout.const_shape)
    return y


# ---- integer ----------------------------------------------------------------------------
def inverse_std(v: torch.Tensor) -> torch.Tensor:
    """g ~ 2^15 / sqrt(v)."""
    return (qmath.inverse_sqrt(v) + (1 << (SQRT_ROUND_SHIFT - 1))) >> SQRT_ROUND_SHIFT


def normalized_integers(q: torch.Tensor, layout: Layout, x_t, out_t, norm: Rescale, var_shift: int):
    """n of docs/integer-semantics.md "LayerNorm", computed per row of `layout`."""
    shape, axes, count = q.shape, layout.axes, layout.count
    q = q.reshape(layout.view)
    lo, hi = out_t.dtype.qmin, out_t.dtype.qmax
    mean = torch.round(q.sum(dim=axes, keepdim=True).to(torch.float64) / count).to(torch.int64)
    if x_t.qbits <= NARROW_BITS:
        d = q - mean.clamp(x_t.dtype.qmin, x_t.dtype.qmax)
        g = inverse_std((d * d).sum(dim=axes, keepdim=True) >> var_shift)
        n = qmath.requantize(d * g, norm.multiplier, NORM_SHIFT_BASE + norm.shift, 0, lo, hi)
    else:
        d = q - mean
        g = inverse_std(((d * d).sum(dim=axes, keepdim=True).to(torch.float64) / count).to(torch.int64))
        g = qmath.requantize(g, norm.multiplier, norm.shift, 0, 0, G_MAX).to(torch.int64)
        n = qmath.requantize((d >> 1) * g, 1, WIDE_NORM_SHIFT, 0, lo, hi)
    return n.reshape(shape).to(torch.int64)


def rms_integers(q: torch.Tensor, layout: Layout, x_t, out_t, norm: Rescale) -> torch.Tensor:
    """RMSNorm's n: x = q + zp, V = trunc(fl64(sum x^2) / N), G = R(g(V), norm, 0..65535),
    n = clamp((x * G + 2^7) >> 8) into the signed range of the output's bits."""
    x = q.to(torch.int64) + int(x_t.zerop)
    v = ((x * x).sum(dim=layout.axes, keepdim=True).to(torch.float64) / layout.count).to(torch.int64)
    g = qmath.requantize(inverse_std(v), norm.multiplier, norm.shift, 0, 0, G_MAX).to(torch.int64)
    lo, hi = qmath.integer_range(out_t.qbits, True)
    return ((x * g + (1 << (RMS_ROUND_SHIFT - 1))) >> RMS_ROUND_SHIFT).clamp(lo, hi)


def integer_constant(node, key: str, layout: Layout) -> torch.Tensor:
    """q + zp of the quantized weights or biases, shaped to broadcast against the input."""
    zp = torch.as_tensor(node.get_constant(key).zerop).to(torch.int64)
    return reshaped_constant(node, key, layout.const_shape).to(torch.int64) + per_channel(zp, layout.channel_shape)


def affine_integer(node, z: torch.Tensor, layout: Layout, out_t, rescale: Rescale) -> torch.Tensor:
    """out = R((q_w + zp_w) * n + (q_b + zp_b), M, s) - zp_out, M/s per tensor or per channel."""
    if "weights" in node.constants:
        z = integer_constant(node, "weights", layout) * z
    if "biases" in node.constants:
        z = z + integer_constant(node, "biases", layout)
    m, s = (per_channel(v, layout.channel_shape) for v in (rescale.multiplier, rescale.shift))
    return qmath.requantize(z, m, s, out_t.zerop, out_t.qmin, out_t.qmax)


# ---- quantize ---------------------------------------------------------------------------
def variance_shift(count: int) -> int:
    """The tool chain's var_shift (ceil(log2 N) - 4, rounded up to even), at least 0:
    V stays near 16 times the variance in input steps, below 2^21."""
    shift = math.ceil(math.log2(count)) - VARIANCE_HEADROOM_BITS if count > 1 else 0
    return max(0, shift + (shift & 1))


def needed_range(node, out) -> float:
    """How far |x - mean| / std must be represented: no further than where every
    element's output, weights * x + biases, has left the output's range (it saturates
    there anyway)."""
    y_lo, y_hi = (out.qmin + out.zerop) / out.scale, (out.qmax + out.zerop) / out.scale
    gamma = node.get_constant("weights").betensor.to(torch.float64).reshape(-1) if "weights" in node.constants \
        else torch.ones(1, dtype=torch.float64)
    beta = node.get_constant("biases").betensor.to(torch.float64).reshape(-1) if "biases" in node.constants \
        else torch.zeros(1, dtype=torch.float64)
    reach = torch.maximum((y_lo - beta).abs(), (y_hi - beta).abs()) / gamma.abs()
    reach = reach[gamma != 0]
    return float(reach.max()) if reach.numel() else 0.0


def check_input(node):
    QT.check_quantized_inputs(node)
    x_t = node.inputs[0]
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): unscaled or per-channel input")
    return x_t


def write_normalized_fields(node, x_t, count: int, reach: float) -> float:
    """var_shift and norm_scale/norm_shift for rows of `count` elements: n holds
    |x - mean| / std up to `reach` at the finest scale; returns that scale s_n."""
    if x_t.qbits <= NARROW_BITS:
        var_shift = variance_shift(count)
        # n = x_hat * 2^(7 - adj) / sqrt(N), reaching at most 2^7 at x_hat = reach
        adj = math.ceil(math.log2(reach / math.sqrt(count))) if reach > 0 else -(var_shift >> 1)
        adj = max(adj, -(var_shift >> 1))
        Shift(var_shift, Dtype.UINT8).write(node, "var_")
        Rescale(1, (var_shift >> 1) + adj, Dtype.UINT8, Dtype.UINT8).write(node, "norm_")
        return 2.0 ** (7 - adj) / math.sqrt(count)
    s_n = node.outputs[0].dtype.qmax / math.sqrt(count)
    Shift(0, Dtype.UINT8).write(node, "var_")
    Rescale.from_ratio(s_n / (1 << WIDE_NORM_SHIFT), NORM_MULTIPLIER_BITS).write(node, "norm_")
    return s_n


def quantize_affine(node, s_n: float, stored_shape) -> None:
    """Weights under the weight settings (per channel along the last axis of
    `stored_shape`, the shape the constants are written in), biases int32 at s_n * s_w,
    the output rescale s_out / (s_n * s_w) and the inverse square root table."""
    st = settings_of(node)
    out_t = node.outputs[0]
    for key in ("weights", "biases"):
        if key in node.constants:
            c = node.constants[key]
            c.betensor = reshaped_constant(node, key, stored_shape)
            c.ir_shape = tuple(stored_shape)
    w_scale = torch.tensor(1.0)
    if "weights" in node.constants:
        w_scale = QT.quantize_weights(node, "weights", axis=len(stored_shape) - 1)
    acc_scale = torch.tensor(s_n, dtype=torch.float32) * torch.as_tensor(w_scale, dtype=torch.float32)
    ratio = torch.tensor(out_t.scale, dtype=torch.float32) / acc_scale
    if acc_scale.numel() == 1:
        acc_scale, ratio = float(acc_scale), float(ratio)
    QT.quantize_biases(node, acc_scale, torch.zeros(()), 0)
    Rescale.from_ratio(ratio, st.multiplier_bits).write(node)
    fields.write_lut(node, qmath.ISQRT_TABLE, Dtype.INT16)


def quantize_normalization(node, count: int, stored_shape) -> None:
    """The quantize of the mean/variance layers with weights and biases: a signed output,
    n at the finest scale holding every value that matters (see needed_range)."""
    x_t = check_input(node)
    QT.quantize_activation(node, node.outputs[0], signed=True)
    reach = min(math.sqrt(count), needed_range(node, node.outputs[0]))
    quantize_affine(node, write_normalized_fields(node, x_t, count, reach), stored_shape)


# ---- the forward of the layers with weights and biases ----------------------------------
def forward(node, layout: Layout, default_eps: float = 1e-5) -> torch.Tensor:
    x_t, out_t = node.inputs[0], node.outputs[0]
    check_constants(node, layout)
    if node.quantized:
        n = normalized_integers(x_t.betensor.to(torch.int64), layout, x_t, out_t, Rescale.read(node, "norm_"),
                                Shift.read(node, "var_").value)
        return QT.store_output(node, affine_integer(node, n, layout, out_t, Rescale.read(node)), out_t)
    eps = float(node.get_param("epsilon", default_eps))
    out_t.betensor = affine_float(node, normalized_float(x_t.betensor, layout, eps), layout)
    return out_t.betensor
