"""Convolution: NHWC activations, weights [out, kh, kw, in/group], fused activation."""
import torch.nn.functional as F

from ..registry import OpType, op_register
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


@op_register(OpType.Convolution, "1.0")
def convolution_forward(self, *args):
    biases = self.constants["biases"].betensor if "biases" in self.constants else None
    out = conv2d_nhwc(self, self.inputs[0].betensor, self.get_constant("weights").betensor, biases)
    out = apply_fused_activation(self, out)
    self.outputs[0].betensor = out
    return out
