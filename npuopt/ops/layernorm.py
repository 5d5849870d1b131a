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

from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from . import _norm
from ._layout import axis_list


def layout(node, shape) -> _norm.Layout:
    """Rows over `axis`; weights over the normalized axes, per-channel values along the last."""
    axes = axis_list(node, "axis", len(shape))
    return _norm.plain_layout(shape, axes, axes, axes[-1])


@op_register(OpType.LayerNorm, "1.0")
def layernorm_forward(self, *args):
    lay = layout(self, self.inputs[0].betensor.shape)
    if len(self.outputs) != 1:
        raise IRError(f"layer '{self.name}' (LayerNorm): {len(self.outputs)} outputs (mean and inverse "
                      f"deviation tops) are not supported")
    return _norm.forward(self, lay)


@quant_register(OpType.LayerNorm, "1.0")
def layernorm_quantize(self, *args):
    """Constants stored over the normalized axes, per channel along the last of them."""
    shape = self.inputs[0].ir_shape
    axes = axis_list(self, "axis", len(shape))
    _norm.quantize_normalization(self, math.prod(int(shape[a]) for a in axes), [int(shape[a]) for a in axes])
