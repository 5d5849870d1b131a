"""OPT's ops/conv.py helpers: the convolution's forward and quantize, and the steps of
OPT's quantization of a linear layer y = act(x * W + b) that other layers' files reuse
(weights with the output channel first). A star import of it also gives what OPT's
module hands on: the utils, the fused-activation helpers, the Winograd checker."""
import math

import torch

from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ..ops import activation as npu
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ._base import delegate, in_npuopt_form
from .activation import (apply_with_activation, apply_with_activation_quantize,  # noqa: F401
                         with_activation_allow_merge_out_zerop_to_bias, with_activation_out_is_signed)
from .convwinograd import WinogradAllocator, WinogradChecker  # noqa: F401

_CONVOLUTIONS = (OpType.Convolution, OpType.DepthwiseConv, OpType.FullyConnected)
conv2d = delegate(OP_FORWARDS, *_CONVOLUTIONS)
conv2d_quantize = delegate(OP_QUANTIZERS, *_CONVOLUTIONS)


@in_npuopt_form
def linear_op_quantize(self, *args) -> None:
    """Quantize the output (signed by the with_activation), the weights (per tensor, per
    channel, or per group of a grouped layer), the biases to int32 at s_x * s_w without
    the input zero point (absorb_input_zp_to_bias adds it), the rescale s_y / (s_x * s_w),
    and the with_activation's params."""
    x, out = self.inputs[0], self.outputs[0]
    st = settings_of(self)
    QT.quantize_activation(self, out, signed=with_activation_out_is_signed(self) or self.force_dtype_int)
    groups = int(self.get_param("group", optional=True, default_value=1))
    w_scale = QT.quantize_weights(self, "weights", axis=0, groups=groups)
    b_scale = torch.tensor(x.scale, dtype=torch.float32) * torch.as_tensor(w_scale, dtype=torch.float32)
    if isinstance(w_scale, torch.Tensor):  # the ratios as npuopt's linear layers compute them
        ratio = torch.tensor(out.scale, dtype=torch.float32) / b_scale
    else:
        ratio, b_scale = out.scale / (x.scale * w_scale), float(b_scale)
    Rescale.from_ratio(ratio, st.multiplier_bits, unify_shifts=st.unify_shifts_for_aiff).write(self)
    QT.quantize_biases(self, b_scale, torch.zeros(()), 0)
    npu.quantize_fused(self, out)


def compute_input_zp_mul_reduce_weight(zp, w: torch.Tensor) -> torch.Tensor:
    """zp times the sum of each output channel's weights."""
    return (w * zp).reshape(w.shape[0], -1).sum(dim=1)


@in_npuopt_form
def absorb_input_zp_to_bias(self, *args) -> None:
    """Fold the input zero point into the quantized biases: b += zp_x * sum(q_w + zp_w)
    over each output channel, kept in the biases' range."""
    b = self.constants["biases"]
    w = QT.integer_weights(self.constants["weights"])
    folded = compute_input_zp_mul_reduce_weight(float(self.inputs[0].zerop), w)
    value = b.betensor.to(torch.float64) + folded.reshape(b.betensor.shape).to(b.betensor.device)
    b.betensor = value.clamp(b.qmin, b.qmax).to(b.betensor.dtype)


def clear_lower_bits_for_bias(self, *args, grouped: bool = False, dim: int = -1) -> None:
    """Zero the low bits of the quantized biases that attrs['bias_effective_bits'] cannot
    hold (the chip keeps that many high bits): all biases alike, or each slice along `dim`
    alike when `grouped`. With npuopt's 32-bit biases and effective bits, nothing changes."""
    b = self.constants["biases"]
    limit = 2.0 ** (int(self.attrs["bias_effective_bits"]) - 1)
    v = b.betensor.to(torch.int64)
    if grouped:
        need = torch.maximum(v.amax(dim=dim).clamp(min=1) / (limit - 1), v.amin(dim=dim).clamp(max=-1) / -limit)
        low = torch.ceil(torch.log2(need)).clamp(min=0).long().unsqueeze(dim)
    else:
        need = max(max(int(v.max()), 1) / (limit - 1), min(int(v.min()), -1) / -limit)
        low = max(0, math.ceil(math.log2(need)))
    b.betensor = ((v >> low) << low).to(b.betensor.dtype)


def absorb_input_zp_to_bias_and_compress_bias_for_aiff(self, *args) -> None:
    absorb_input_zp_to_bias(self, *args)
    clear_lower_bits_for_bias(self, *args)
