"""YuvToRgb: I420 rows [N, H*W + 2*(H/2)*(W/2)] to an NHWC RGB image [N, H, W, 3] (H, W
from the top's IR shape), with the tool chain's arithmetic (float32): U and V brought to
full size by nearest-neighbour upsampling, then the odd rows between two others set to
round(above/2 + below/2) and the inner columns to round((3 * left + right) / 4) (odd
columns) or round((left + 3 * right) / 4) (even ones), and

    RGB = round(((YUV - input_offsets) . matrix^T + 128) * 2^-shift + output_offsets),

clamped to 0..255 (float and quantized alike). The constant 128 is the rounding of an
8-bit shift: with the parser's BT709 float coefficients and shift 0 the float results are
128 too large, as the tool chain's float forward gives them. Coefficients and the
quantized form: ops/_colour.py."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._colour import coefficients, colour_quantize, i420_size, store_pixels

BITS = 8  # the quantized matrix's fraction bits


def _chroma(uv: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[N, 2, H/2, W/2] chroma planes at full size, interpolated as the tool chain does."""
    full = F.interpolate(uv, size=[height, width], mode="nearest")
    odd_rows = torch.arange(1, height - 1, 2, device=uv.device)
    full[:, :, odd_rows] = torch.round(full[:, :, odd_rows - 1] / 2 + full[:, :, odd_rows + 1] / 2)
    left, right = full[..., :-2], full[..., 2:]
    odd_columns = (torch.arange(1, width - 1, device=uv.device) % 2 == 1)
    inner = torch.where(odd_columns, (left * 3 + right) * 0.25, (left + right * 3) * 0.25)
    full[..., 1:-1] = torch.round(inner)
    return full


@op_register(OpType.YuvToRgb, "1.0")
def yuvtorgb_forward(self, *args):
    check_inputs(self, (1,))
    x = self.inputs[0].betensor
    shape = [int(d) for d in self.outputs[0].ir_shape]
    if len(shape) != 4 or shape[-1] != 3:
        raise IRError(f"layer '{self.name}' (YuvToRgb): the top must be an NHWC RGB image [N, H, W, 3], the IR "
                      f"says {shape}")
    height, width = shape[1:3]
    if x.dim() != 2 or x.shape[1] != i420_size(height, width):
        raise IRError(f"layer '{self.name}' (YuvToRgb): an I420 input of a {height}x{width} image is [N, "
                      f"{i420_size(height, width)}], got shape {list(x.shape)}")
    in_offsets, out_offsets, matrix, shift = coefficients(self, x.device)
    n, plane = x.shape[0], height * width
    y = x[:, :plane].reshape(n, 1, height, width).to(torch.float32)
    uv = x[:, plane:].reshape(n, 2, height // 2, width // 2).to(torch.float32)
    yuv = torch.cat([y, _chroma(uv, height, width)], dim=1).permute(0, 2, 3, 1)
    rgb = (torch.matmul(yuv - in_offsets, matrix.T) + 128) * 0.5 ** shift + out_offsets
    return store_pixels(self, torch.round(rgb))


@quant_register(OpType.YuvToRgb, "1.0")
def yuvtorgb_quantize(self, *args):
    colour_quantize(self, BITS)
