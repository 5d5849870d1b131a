"""ConvTranspose: the transposed 2-D convolution of an NHWC input, weights
[O/group, kh, kw, C] as the parser writes them; the full result is cropped by
pad_top/bottom/left/right (output_padding_y/x extend its end first), then the
fused activation.

Quantized as the tool chain does (ops/_conv.py): weights quantized as if repeated
for every group, acc = conv_transpose(q_x + zp_x, q_w + zp_w) - zp_x * row sums +
biases, then ops/_linear.py's output stage."""
from ..registry import OpType, op_register, patches_register, quant_register
from ._conv import conv_transpose_float, conv_transpose_quantized, geometry, patches, quantize_transposed
from ._layout import optional_constant
from .activation import apply_fused_activation


def conv_transpose_forward(node, dims: int):
    """The float or integer forward of a `dims`-D transposed convolution."""
    if node.quantized:
        return conv_transpose_quantized(node, dims)
    x, weights, biases = node.inputs[0].betensor, node.get_constant("weights").betensor, \
        optional_constant(node, "biases")
    w = geometry(node, x, weights, dims, transposed=True, biases=biases)
    out = apply_fused_activation(node, conv_transpose_float(x, weights, biases, w, dims))
    node.outputs[0].betensor = out
    return out


@op_register(OpType.ConvTranspose, "1.0")
def convtranspose_forward(self, *args):
    return conv_transpose_forward(self, 2)


@quant_register(OpType.ConvTranspose, "1.0")
def convtranspose_quantize(self, *args):
    quantize_transposed(self)


@patches_register(OpType.ConvTranspose, "1.0")
def convtranspose_patches(self, x, rows, real):
    return patches(self, x, rows, real, 2, transposed=True)
