"""RgbToYuv: an NHWC RGB image [N, H, W, 3] to I420 rows [N, H*W + 2*ceil(H/2)*ceil(W/2)]
(the Y plane, then U and V of every second row and column, from the top-left pixel of each
2x2 block), with the tool chain's arithmetic (float32):

    YUV = floor(matrix . RGB + bias) * 2^-shift,
    bias = (-input_offsets) . matrix + output_offsets * 2^shift + 512,

then clamped to 0..255 (the quantized form rounds half to even before). The constant 512
is the rounding of a 10-bit shift: with the parser's BT709 float coefficients and shift 0
the float results saturate at 255, as the tool chain's float forward gives them.
Coefficients and the quantized form: ops/_colour.py."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._colour import coefficients, colour_quantize, store_pixels
from ._layout import nhwc_to_nchw

BITS = 10  # the quantized matrix's fraction bits


@op_register(OpType.RgbToYuv, "1.0")
def rgbtoyuv_forward(self, *args):
    check_inputs(self, (1,))
    x = self.inputs[0].betensor
    if x.dim() != 4 or x.shape[-1] != 3:
        raise IRError(f"layer '{self.name}' (RgbToYuv): needs an NHWC RGB input [N, H, W, 3], got shape "
                      f"{list(x.shape)}")
    in_offsets, out_offsets, matrix, shift = coefficients(self, x.device)
    bias = -in_offsets @ matrix + out_offsets * 2 ** shift + 512
    yuv = F.conv2d(nhwc_to_nchw(x).to(torch.float32), matrix.reshape(3, 3, 1, 1))
    yuv = torch.floor(yuv + bias.reshape(3, 1, 1)) * 0.5 ** shift
    rows = torch.cat([yuv[:, 0].reshape(x.shape[0], -1), yuv[:, 1:, ::2, ::2].reshape(x.shape[0], -1)], dim=-1)
    return store_pixels(self, torch.round(rows) if self.quantized else rows)


@quant_register(OpType.RgbToYuv, "1.0")
def rgbtoyuv_quantize(self, *args):
    colour_quantize(self, BITS)
