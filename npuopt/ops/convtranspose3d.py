"""ConvTranspose3D: ConvTranspose over depth, height and width of an NDHWC input,
weights [O/group, kh, kw, kd, C] as the parser writes them, cropped by
pad_z/y/x_begin/end (no output_padding), then the fused activation; quantized
the same way (ops/_conv.py)."""
from ..registry import OpType, op_register, patches_register, quant_register
from ._conv import patches, quantize_transposed
from .convtranspose import conv_transpose_forward


@op_register(OpType.ConvTranspose3D, "1.0")
def convtranspose3d_forward(self, *args):
    return conv_transpose_forward(self, 3)


@quant_register(OpType.ConvTranspose3D, "1.0")
def convtranspose3d_quantize(self, *args):
    quantize_transposed(self)


@patches_register(OpType.ConvTranspose3D, "1.0")
def convtranspose3d_patches(self, x, rows, real):
    return patches(self, x, rows, real, 3, transposed=True)
