"""RMSNorm over `axis`: y = weights * x / sqrt(mean(x^2) + epsilon) (+ biases), weights
over the normalized axes; float32 as the tool chain.

Quantized (the tool chain's form, epsilon unused; x = q + zp_in, N elements a row):
V = trunc(fl64(sum x^2) / N), g = (inverse_sqrt(V) + 2^15) >> 16 (~2^15 / rms),
G = R(g, norm_scale_value, norm_shift_value, 0, 65535), n = clamp((x * G + 2^7) >> 8)
into the signed range of the output's bits, then z = (q_w + zp_w) * n + (q_b + zp_b)
and out = R(z, M, s) - zp_out, M/s = scale_value/shift_value or per channel the
constants scale/shift along the first normalized axis. n = x / rms at s_n =
2^7 * norm_scale * 2^-norm_shift; npuopt takes s_n = qmax_out / reach (reach: as
LayerNorm's, at most sqrt(N)), 15-bit multiplier, signed output, biases int32 at
s_n * s_w; per-channel weights only over one axis (the tool chain broadcasts their
rescale along the first normalized axis but their zero points along the last)."""
import math

import torch

from ..dtype import computing_float
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _norm


def layout(node, shape) -> _norm.Layout:
    axes = _norm.check_axes(node, node.get_param("axis"), len(shape))
    return _norm.plain_layout(shape, axes, axes, axes[0])


@op_register(OpType.RMSNorm, "1.0")
def rmsnorm_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    lay = layout(self, x_t.betensor.shape)
    _norm.check_constants(self, lay)
    if self.quantized:
        n = _norm.rms_integers(x_t.betensor, lay, x_t, out_t, Rescale.read(self, "norm_"))
        return QT.store_output(self, _norm.affine_integer(self, n, lay, out_t, Rescale.read(self)), out_t)
    x = computing_float(x_t.betensor)
    var = torch.mean(x * x, dim=lay.axes, keepdim=True)
    eps = float(self.get_param("epsilon", 1e-5))
    out_t.betensor = _norm.affine_float(self, x * (1.0 / torch.pow(var + eps, 0.5)), lay)
    return out_t.betensor


@quant_register(OpType.RMSNorm, "1.0")
def rmsnorm_quantize(self, *args):
    x_t = _norm.check_input(self)
    out_t = self.outputs[0]
    axes = _norm.check_axes(self, self.get_param("axis"), len(x_t.ir_shape))
    if len(axes) > 1 and "weights" in self.constants and \
            settings_of(self).quantize_method_for_weight.per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (RMSNorm): per-channel weights over {len(axes)} axes")
    count = math.prod(int(x_t.ir_shape[a]) for a in axes)
    QT.quantize_activation(self, out_t, signed=True)
    reach = min(math.sqrt(count), _norm.needed_range(self, out_t)) or math.sqrt(count)
    s_n = out_t.dtype.qmax / reach
    Rescale.from_ratio(s_n / (1 << _norm.WIDE_NORM_SHIFT), _norm.NORM_MULTIPLIER_BITS).write(self, "norm_")
    _norm.quantize_affine(self, s_n, [int(x_t.ir_shape[a]) for a in axes])
