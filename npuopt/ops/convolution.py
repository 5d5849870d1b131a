"""Convolution and DepthwiseConv: NHWC activations, weights [out, kh, kw, in/group],
fused activation. DepthwiseConv is the parser's name for a convolution with
group = C (weights [C*multiplier, kh, kw, 1]); it computes the same.

Quantized: acc = sum (q_w + zp_w) * x' + biases, x' the input integers padded
with -zp_x (the biases hold zp_x * sum(q_w + zp_w), so padding counts as real
zero), then ops/_linear.py's output stage. Grouped layers get one weight scale
per group; DepthwiseConv stores its rescale as per-channel constants."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, patches_register, quant_register
from ._conv import conv_float, geometry, patches_2d
from ._layout import nchw_to_nhwc, nhwc_to_nchw, optional_constant, pad_nchw
from ._linear import linear_output, quantize_linear
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


def convolution_quantized(node):
    x_t = node.inputs[0]
    w = conv_params(node, x_t.betensor, node.get_constant("weights").betensor, optional_constant(node, "biases"))
    pads = w.pads[0] + w.pads[1]
    xin = pad_nchw(nhwc_to_nchw(x_t.betensor.to(torch.float32)), pads, value=-float(x_t.zerop))
    acc = qmath.exact_conv2d(xin, QT.int_absmax(x_t), w.stride, w.dilation, w.group, conv_plan(node, x_t))
    return linear_output(node, nchw_to_nhwc(acc))


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


patches_register([OpType.Convolution, OpType.DepthwiseConv], "1.0")(patches_2d)
