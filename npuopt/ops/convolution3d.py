"""Convolution3D: an NDHWC input, weights [O, kh, kw, kd, C/group] as the parser
writes them, pads pad_z/y/x_begin/end, then the fused activation.

Quantized like Convolution: acc = sum (q_w + zp_w) * x' over each window, x' the
input integers padded with -zp_x, + biases (zp_x * sum(q_w + zp_w) folded in),
then ops/_linear.py's output stage; grouped layers get one weight scale per group."""
from ..registry import OpType, op_register, patches_register, quant_register
from ._conv import conv_float, conv_quantized, geometry, patches
from ._layout import optional_constant
from ._linear import quantize_linear
from .activation import apply_fused_activation


@op_register(OpType.Convolution3D, "1.0")
def convolution3d_forward(self, *args):
    if self.quantized:
        return conv_quantized(self, 3)
    x, weights, biases = self.inputs[0].betensor, self.get_constant("weights").betensor, \
        optional_constant(self, "biases")
    w = geometry(self, x, weights, 3, biases=biases)
    out = apply_fused_activation(self, conv_float(x, weights, biases, w, 3))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Convolution3D, "1.0")
def convolution3d_quantize(self, *args):
    quantize_linear(self, groups=self.get_param("group", 1))


@patches_register(OpType.Convolution3D, "1.0")
def convolution3d_patches(self, x, rows, real):
    return patches(self, x, rows, real, 3)
