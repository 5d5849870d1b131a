"""SpaceToBatch (NHWC): H and W are padded (pad_top/bottom/left/right, with real 0) and
cut into block_size_y x block_size_x blocks; the position inside the block goes to the
batch: out[(y * bx + x) * N + n, i, j, c] = padded[n, i * by + y, j * bx + x, c].

Quantized: the same code moves the integers (the padding is -zp, real 0); the input's
quantization is passed through."""
import torch.nn.functional as F

from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import block_sizes, divides, fill_value, int_param, nhwc_input, set_output


@op_register(OpType.SpaceToBatch, "1.0")
def spacetobatch_forward(self, *args):
    x = nhwc_input(self)
    by, bx = block_sizes(self)
    top, bottom, left, right = (int_param(self, k, 0, minimum=0) for k in
                                ("pad_top", "pad_bottom", "pad_left", "pad_right"))
    y = F.pad(x, (0, 0, left, right, top, bottom), value=fill_value(self))
    n, h, w, c = y.shape
    divides(self, "the padded height", h, by)
    divides(self, "the padded width", w, bx)
    y = y.reshape(n, h // by, by, w // bx, bx, c).permute(2, 4, 0, 1, 3, 5)
    return set_output(self, y.reshape(n * by * bx, h // by, w // bx, c))


@quant_register(OpType.SpaceToBatch, "1.0")
def spacetobatch_quantize(self, *args):
    QT.pass_through(self)
