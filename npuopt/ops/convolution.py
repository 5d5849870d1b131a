"""Convolution and DepthwiseConv: NHWC activations, weights [out, kh, kw, in/group],
fused activation. DepthwiseConv is the parser's name for a convolution with
group = C (weights [C*multiplier, kh, kw, 1]); it computes the same.

Quantized: acc = sum (q_w + zp_w) * x' + biases, x' the input integers padded
with -zp_x (the biases hold zp_x * sum(q_w + zp_w), so padding counts as real
zero), then ops/_linear.py's output stage. Grouped layers get one weight scale
per group; DepthwiseConv stores its rescale as per-channel constants."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw, window_params
from ._linear import linear_output, quantize_linear
from .activation import apply_fused_activation


def conv_params(node, x: torch.Tensor, weights: torch.Tensor):
    """Window params, checked against each other, the input and the weights."""
    p = window_params(node)
    group = node.get_param("group", 1)
    for key, v in (("group", group),) + tuple(zip(("kernel_y", "kernel_x"), p["kernel"])) + \
            tuple(zip(("stride_y", "stride_x"), p["stride"])) + tuple(zip(("dilation_y", "dilation_x"), p["dilation"])):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise IRError(f"layer '{node.name}' ({node.type}): {key}={v} must be a positive integer")
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in p["pads"]):
        raise IRError(f"layer '{node.name}' ({node.type}): pads {list(p['pads'])} must be non-negative integers")
    cin = x.shape[-1]
    if cin % group or weights.shape[0] % group:
        raise IRError(f"layer '{node.name}' ({node.type}): group={group} does not divide the {cin} input "
                      f"channels and the {weights.shape[0]} output channels")
    if weights.dim() != 4 or tuple(weights.shape[1:3]) != tuple(p["kernel"]) or weights.shape[3] * group != cin:
        raise IRError(f"layer '{node.name}' ({node.type}): weights {list(weights.shape)} do not fit kernel "
                      f"{list(p['kernel'])}, group {group} and {cin} input channels")
    num_output = node.get_param("num_output", weights.shape[0])
    if num_output != weights.shape[0]:
        raise IRError(f"layer '{node.name}' ({node.type}): num_output={num_output} but the weights have "
                      f"{weights.shape[0]} output channels")
    return p, group


def conv2d_nhwc(node, x, weights, biases):
    """2-D convolution of an NHWC float tensor with IR-layout weights."""
    p, group = conv_params(node, x, weights)
    xin = pad_nchw(nhwc_to_nchw(x), p["pads"])
    out = F.conv2d(xin, weights.permute(0, 3, 1, 2), biases, p["stride"], 0, p["dilation"], group)
    return nchw_to_nhwc(out)


def conv_plan(node, x_t):
    """qmath.ConvPlan of the stored integer weights (+ zero points), cached while they stay."""
    w = node.get_constant("weights")
    key = ("_conv_plan", id(w.betensor), w.betensor._version, QT.int_absmax(x_t), x_t.betensor.device.type)
    plan = node.attrs.get("_conv_plan")
    if plan is None or plan[0] != key:
        wi = QT.integer_weights(w).permute(0, 3, 1, 2)
        plan = (key, qmath.ConvPlan(wi, QT.int_absmax(x_t), x_t.betensor.device.type))
        node.attrs["_conv_plan"] = plan
    return plan[1]


def convolution_quantized(node):
    x_t = node.inputs[0]
    p, group = conv_params(node, x_t.betensor, node.get_constant("weights").betensor)
    xin = pad_nchw(nhwc_to_nchw(x_t.betensor.to(torch.float32)), p["pads"], value=-float(x_t.zerop))
    acc = qmath.exact_conv2d(xin, QT.int_absmax(x_t), p["stride"], p["dilation"], group, conv_plan(node, x_t))
    return linear_output(node, nchw_to_nhwc(acc))


@op_register(OpType.Convolution, "1.0")
@op_register(OpType.DepthwiseConv, "1.0")
def convolution_forward(self, *args):
    if self.quantized:
        return convolution_quantized(self)
    biases = self.constants["biases"].betensor if "biases" in self.constants else None
    out = conv2d_nhwc(self, self.inputs[0].betensor, self.get_constant("weights").betensor, biases)
    out = apply_fused_activation(self, out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Convolution, "1.0")
@quant_register(OpType.DepthwiseConv, "1.0")
def convolution_quantize(self, *args):
    quantize_linear(self, groups=self.get_param("group", 1), per_channel_constants=self.type == OpType.DepthwiseConv)
