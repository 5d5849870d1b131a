"""Convolution and DepthwiseConv: NHWC activations, weights [out, kh, kw, in/group],
fused activation. DepthwiseConv is the parser's name for a convolution with
group = C (weights [C*multiplier, kh, kw, 1]); it computes the same.

Quantized: acc = sum (q_w + zp_w) * x' + biases, x' the input integers padded
with -zp_x (the biases hold zp_x * sum(q_w + zp_w), so padding counts as real
zero), then ops/_linear.py's output stage. Grouped layers get one weight scale
per group; DepthwiseConv stores its rescale as per-channel constants."""
import math

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, patches_register, quant_register
from ._conv import conv_float, geometry, patches
from ._layout import nchw_to_nhwc, optional_constant, padded_nchw
from ._linear import output_stage, quantize_linear
from .activation import apply_fused_activation


def conv_params(node, x: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor = None):
    """The checked window params (ops/_conv.py), and DepthwiseConv's `multiplier`
    (when given) against the weights."""
    w = geometry(node, x, weights, 2, biases=biases)
    if node.type == OpType.DepthwiseConv and "multiplier" in node.params:
        m = node.params["multiplier"]
        if isinstance(m, bool) or not isinstance(m, int) or m < 1 or m * w.group != weights.shape[0]:
            raise IRError(f"layer '{node.name}' ({node.type}): multiplier={m!r} does not fit group {w.group} and "
                          f"the weights' {weights.shape[0]} output channels (multiplier * group)")
    return w


def conv_plan(node, x_t):
    """qmath.ConvPlan of the stored integer weights (+ zero points), cached while they stay."""
    absmax, device = QT.int_absmax(x_t), x_t.betensor.device.type
    return QT.cached_by_weights(node, "_conv_plan", (absmax, device), lambda: qmath.ConvPlan(
        QT.integer_weights(node.get_constant("weights")).permute(0, 3, 1, 2), absmax, device))


# float32 bytes of the input and accumulators of one part of a quantized convolution's
# samples: the part's conversion, product and output stage stay in the CPU's L3 cache (on
# EfficientNet-Lite0's convolutions, batch 50, 2 threads: 0.69 s, against 1.17 s whole)
PART_BYTES = 8 << 20


def convolution_quantized(node):
    """By parts of the samples (on CPU), each made float32, convolved and taken through
    the output stage while it is in cache; the integers are the same for any part size."""
    x_t = node.inputs[0]
    x = x_t.betensor
    w = conv_params(node, x, node.get_constant("weights").betensor, optional_constant(node, "biases"))
    pads, pad_value, absmax, plan = w.pads[0] + w.pads[1], -float(x_t.zerop), QT.int_absmax(x_t), conv_plan(node, x_t)
    stage = output_stage(node)

    def part(xs):
        acc = qmath.exact_conv2d(padded_nchw(xs, pads, pad_value), absmax, w.stride, w.dilation, w.group, plan)
        return stage(nchw_to_nhwc(acc))

    per_sample = 4 * (x[:1].numel() + math.prod(node.outputs[0].ir_shape[1:]))  # the IR's output: one sample
    samples = len(x) if x.device.type != "cpu" else max(1, PART_BYTES // max(1, per_sample))
    y = part(x) if samples >= len(x) else torch.cat([part(x[i: i + samples]) for i in range(0, len(x), samples)])
    return QT.store_output(node, y, node.outputs[0])


@op_register(OpType.Convolution, "1.0")
@op_register(OpType.DepthwiseConv, "1.0")
def convolution_forward(self, *args):
    if self.quantized:
        return convolution_quantized(self)
    x, weights, biases = self.inputs[0].betensor, self.get_constant("weights").betensor, \
        optional_constant(self, "biases")
    w = conv_params(self, x, weights, biases)
    out = apply_fused_activation(self, conv_float(x, weights, biases, w, 2))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Convolution, "1.0")
@quant_register(OpType.DepthwiseConv, "1.0")
def convolution_quantize(self, *args):
    quantize_linear(self, groups=self.get_param("group", 1), per_channel_constants=self.type == OpType.DepthwiseConv)


@patches_register([OpType.Convolution, OpType.DepthwiseConv], "1.0")
def convolution_patches(node, x, rows, real):
    return patches(node, x, rows, real, 2)
