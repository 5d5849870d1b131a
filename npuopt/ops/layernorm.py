"""LayerNorm over `axis` with `weights`/`biases` shaped like the normalized axes, in
the tool chain's forms.

Float (float32, the tool chain's order of operations): m = mean(x), v = mean((x - m)^2),
y = weights * ((x - m) * (1 / (v + epsilon)^0.5)) + biases.

Quantized (epsilon unused), per row of N normalized elements of q (q, not q + zp):
m = round_half_even(fl64(sum q) / N), d = q - m, and R(X, M, s, lo, hi) =
clamp(round_half_even(X * M * 2^-s), lo, hi) with [lo, hi] the output dtype's range:
* input of <= 8 bits (m also clamped to the input dtype's range): V = (sum d^2) >>
  var_shift_value, g = (qmath.inverse_sqrt(V) + 2^15) >> 16 (~2^15 / sqrt(V)),
  n = R(d * g, norm_scale_value, 8 + norm_shift_value);
* wider input: V = trunc(fl64(sum d^2) / N), g = (inverse_sqrt(V) + 2^15) >> 16,
  g = R(g, norm_scale_value, norm_shift_value, 0, 65535), n = R((d >> 1) * g, 1, 7);
then z = (q_w + zp_w) * n + (q_b + zp_b) and out = R(z, M, s) - zp_out clamped to the top
range, M/s = scale_value/shift_value per tensor or `scale`/`shift` per element of the
last normalized axis. n is (x - mean) / std at scale s_n = norm_scale * 2^(7 -
norm_shift + var_shift / 2) / sqrt(N) (<= 8 bits), 2^7 * norm_scale * 2^-norm_shift
(wider); at 16 bits g's rounding limits the precision (g ~ 2^15 / std in input steps).
The constant `lut` is qmath.ISQRT_TABLE, stored for the NPU.

npuopt writes a signed output; for <= 8 bits var_shift = ceil(log2 N) - 4 rounded up to
even (at least 0), norm_scale 1 and norm_shift = var_shift / 2 + a, a <= 0 the smallest
that keeps every normalized value that can still reach the output range within 8 bits
(needed_range); for wider inputs norm_scale/norm_shift = s_n / 2^7 with s_n =
qmax_out / sqrt(N) (15-bit multiplier); weights under the weight settings (per channel:
per element of the last normalized axis), biases int32 at s_n * s_w, the rescale
s_out / (s_n * s_w).
"""
import math

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, Shift
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._layout import axis_list

NARROW_BITS = 8             # inputs up to 8 bits take the shifted-variance form
NORM_SHIFT_BASE = 8         # n = d * g * norm_scale >> (8 + norm_shift) for narrow inputs
WIDE_NORM_SHIFT = 7         # n = (d >> 1) * g >> 7 for wide inputs
SQRT_ROUND_SHIFT = 16       # g = (inverse_sqrt(V) + 2^15) >> 16
NORM_MULTIPLIER_BITS = 15
VARIANCE_HEADROOM_BITS = 4  # the tool chain's var_shift: ceil(log2 N) - 4, made even


def normalized_axes(node, ndim: int):
    return axis_list(node, "axis", ndim)


def broadcast_shape(shape, axes, only_last: bool = False):
    """The input's shape with the normalized axes kept (or only the last of them) and 1 elsewhere."""
    keep = axes[-1:] if only_last else axes
    return [int(shape[d]) if d in keep else 1 for d in range(len(shape))]


def reshaped_constant(node, key: str, shape) -> torch.Tensor:
    value = node.get_constant(key).betensor
    if value.numel() != math.prod(shape):
        raise IRError(f"layer '{node.name}' (LayerNorm): '{key}' has {value.numel()} values for "
                      f"{math.prod(shape)} normalized elements")
    return value.reshape(shape)


def per_channel(v, channel_shape):
    """A zero point or rescale value: a number, or one per element of the last
    normalized axis, shaped to broadcast against the input."""
    if isinstance(v, torch.Tensor):
        return v.reshape(channel_shape) if v.numel() > 1 else v.reshape(())
    return v


# ---- float ----------------------------------------------------------------------------
def layernorm_float(node, x: torch.Tensor, axes) -> torch.Tensor:
    eps = float(node.get_param("epsilon", 1e-5))
    shape = broadcast_shape(x.shape, axes)
    x = x.to(torch.float32)
    mean = torch.mean(x, dim=axes, keepdim=True)
    var = torch.mean((x - mean) ** 2, dim=axes, keepdim=True)
    out = (x - mean) * (1.0 / torch.pow(var + eps, 0.5))
    if "weights" in node.constants:
        out = reshaped_constant(node, "weights", shape) * out
    if "biases" in node.constants:
        out = out + reshaped_constant(node, "biases", shape)
    return out


# ---- integer ----------------------------------------------------------------------------
def normalized_integers(node, q: torch.Tensor, axes, x_t, out_t) -> torch.Tensor:
    """n of the module docstring, from the stored var_shift/norm_scale/norm_shift."""
    count = math.prod(q.shape[a] for a in axes)
    lo, hi = out_t.dtype.qmin, out_t.dtype.qmax
    mean = torch.round(q.sum(dim=axes, keepdim=True).to(torch.float64) / count).to(torch.int64)
    norm = Rescale.read(node, "norm_")
    if x_t.qbits <= NARROW_BITS:
        mean = mean.clamp(x_t.dtype.qmin, x_t.dtype.qmax)
        d = q - mean
        v = (d * d).sum(dim=axes, keepdim=True) >> Shift.read(node, "var_").value
        g = (qmath.inverse_sqrt(v) + (1 << (SQRT_ROUND_SHIFT - 1))) >> SQRT_ROUND_SHIFT
        return qmath.requantize(d * g, norm.multiplier, NORM_SHIFT_BASE + norm.shift, 0, lo, hi)
    d = q - mean
    v = ((d * d).sum(dim=axes, keepdim=True).to(torch.float64) / count).to(torch.int64)
    g = (qmath.inverse_sqrt(v) + (1 << (SQRT_ROUND_SHIFT - 1))) >> SQRT_ROUND_SHIFT
    g = qmath.requantize(g, norm.multiplier, norm.shift, 0, 0, (1 << 16) - 1).to(torch.int64)
    return qmath.requantize((d >> 1) * g, 1, WIDE_NORM_SHIFT, 0, lo, hi)


def integer_constant(node, key: str, shape, channel_shape) -> torch.Tensor:
    """q + zp of the quantized weights or biases, shaped to broadcast against the input."""
    zp = torch.as_tensor(node.get_constant(key).zerop).to(torch.int64)
    return reshaped_constant(node, key, shape).to(torch.int64) + per_channel(zp, channel_shape)


def layernorm_quantized(node, axes) -> torch.Tensor:
    x_t, out_t = node.inputs[0], node.outputs[0]
    q = x_t.betensor.to(torch.int64)
    z = normalized_integers(node, q, axes, x_t, out_t)
    shape = broadcast_shape(q.shape, axes)
    channel_shape = broadcast_shape(q.shape, axes, only_last=True)
    if "weights" in node.constants:
        z = integer_constant(node, "weights", shape, channel_shape) * z
    if "biases" in node.constants:
        z = z + integer_constant(node, "biases", shape, channel_shape)
    rescale = Rescale.read(node)
    m, s = (per_channel(v, channel_shape) for v in (rescale.multiplier, rescale.shift))
    return qmath.requantize(z, m, s, out_t.zerop, out_t.qmin, out_t.qmax)


@op_register(OpType.LayerNorm, "1.0")
def layernorm_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    axes = normalized_axes(self, x_t.betensor.dim())
    if len(self.outputs) != 1:
        raise IRError(f"layer '{self.name}' (LayerNorm): {len(self.outputs)} outputs (mean and inverse "
                      f"deviation tops) are not supported")
    if self.quantized:
        return QT.store_output(self, layernorm_quantized(self, axes), out_t)
    out_t.betensor = layernorm_float(self, x_t.betensor, axes)
    return out_t.betensor


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


@quant_register(OpType.LayerNorm, "1.0")
def layernorm_quantize(self, *args):
    """Signed output; the normalized value n at the finest scale that still holds every
    value that matters (see needed_range); weights under the weight settings, per
    element of the last normalized axis when per channel; biases int32 at s_n * s_w."""
    QT.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (LayerNorm): unscaled or per-channel input")
    st = settings_of(self)
    axes = normalized_axes(self, len(x_t.ir_shape))
    norm_shape = [int(x_t.ir_shape[a]) for a in axes]
    count = math.prod(norm_shape)
    QT.quantize_activation(self, out_t, signed=True)
    reach = min(math.sqrt(count), needed_range(self, out_t))
    if x_t.qbits <= NARROW_BITS:
        var_shift = variance_shift(count)
        # n = x_hat * 2^(7 - adj) / sqrt(N), reaching at most 2^7 at x_hat = reach
        adj = math.ceil(math.log2(reach / math.sqrt(count))) if reach > 0 else -(var_shift >> 1)
        adj = max(adj, -(var_shift >> 1))
        s_n = 2.0 ** (7 - adj) / math.sqrt(count)
        Shift(var_shift, Dtype.UINT8).write(self, "var_")
        Rescale(1, (var_shift >> 1) + adj, Dtype.UINT8, Dtype.UINT8).write(self, "norm_")
    else:
        s_n = out_t.dtype.qmax / math.sqrt(count)
        Shift(0, Dtype.UINT8).write(self, "var_")
        Rescale.from_ratio(s_n / (1 << WIDE_NORM_SHIFT), NORM_MULTIPLIER_BITS).write(self, "norm_")
    w_scale = torch.tensor(1.0)
    for key in ("weights", "biases"):
        if key in self.constants:
            c = self.constants[key]
            c.betensor = reshaped_constant(self, key, norm_shape)
            c.ir_shape = tuple(norm_shape)
    if "weights" in self.constants:
        w_scale = QT.quantize_weights(self, "weights", axis=len(norm_shape) - 1)
    acc_scale = torch.tensor(s_n, dtype=torch.float32) * torch.as_tensor(w_scale, dtype=torch.float32)
    ratio = torch.tensor(out_t.scale, dtype=torch.float32) / acc_scale
    if acc_scale.numel() == 1:
        acc_scale, ratio = float(acc_scale), float(ratio)
    QT.quantize_biases(self, acc_scale, torch.zeros(()), 0)
    Rescale.from_ratio(ratio, st.multiplier_bits).write(self)
    fields.write_lut(self, qmath.ISQRT_TABLE, Dtype.INT16)
