"""Convolution: NHWC activations, weights [out, kh, kw, in/group], fused activation.

Quantized: acc = sum w_q' * (q_x + zp_x) + b_q (exact integers), then the output
stage of npuopt.quant.layers (per-channel or per-tensor multiplier and shift)."""
import torch
import torch.nn.functional as F

from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw, window_params
from .activation import apply_fused_activation


def conv2d_nhwc(node, x, weights, biases):
    """2-D convolution of an NHWC tensor with IR-layout weights."""
    w = window_params(node)
    top, bottom, left, right = w["pads"]
    xin = nhwc_to_nchw(x)
    if top == bottom and left == right:
        padding = (top, left)
    else:
        xin, padding = pad_nchw(xin, w["pads"]), (0, 0)
    out = F.conv2d(xin, weights.permute(0, 3, 1, 2), biases, w["stride"], padding,
                   w["dilation"], node.get_param("group", 1))
    return nchw_to_nhwc(out)


def conv2d_nhwc_int(node, x_t, plan):
    """Exact integer accumulation sum w * (q_x + zp_x) of an NHWC input tensor, as an
    NHWC float tensor holding the exact integers; padding contributes real zeros
    (q_x + zp_x = 0)."""
    w = window_params(node)
    xs = nhwc_to_nchw(QL.shifted_input_scratch(x_t, torch.float32, "conv_input"))
    top, bottom, left, right = w["pads"]
    if top == bottom and left == right:
        padding = (top, left)
    else:
        xs, padding = pad_nchw(xs, w["pads"]), (0, 0)
    acc = qmath.exact_conv2d(xs, None, QL.shifted_absmax(x_t), w["stride"], padding,
                             w["dilation"], node.get_param("group", 1), plan)
    return nchw_to_nhwc(acc)


def conv_plan(node, x_t):
    """ConvPlan of the stored weights (+ weights_zp), cached on the node."""
    consts = [node.constants[k].betensor for k in ("weights", "weights_zp") if k in node.constants]
    absmax = QL.shifted_absmax(x_t)
    return QL.cached(node, f"_conv_plan_{absmax}_{x_t.betensor.device}", consts, lambda: qmath.ConvPlan(
        QL.weight_values(node).permute(0, 3, 1, 2), absmax, x_t.betensor.device.type))


def convolution_quantized(self):
    x_t = self.inputs[0]
    plan = conv_plan(self, x_t)
    return QL.finish_linear(self, conv2d_nhwc_int(self, x_t, plan), plan.bound)


@op_register(OpType.Convolution, "1.0")
def convolution_forward(self, *args):
    if self.quantized:
        return convolution_quantized(self)
    biases = self.constants["biases"].betensor if "biases" in self.constants else None
    out = conv2d_nhwc(self, self.inputs[0].betensor, self.get_constant("weights").betensor, biases)
    out = apply_fused_activation(self, out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Convolution, "1.0")
def convolution_quantize(self, *args):
    QL.quantize_linear(self, axis=0)
