"""DepthToSpace (NHWC): each pixel's C channels become a block_size_y x block_size_x
patch of C / (by * bx) channels. mode DCR (the default): channel = (y * bx + x) * C' + c;
CRD: channel = (c * by + y) * bx + x.

Quantized: the same code moves the integers; the input's quantization is passed through."""
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import block_sizes, divides, nhwc_input, set_output


@op_register(OpType.DepthToSpace, "1.0")
def depthtospace_forward(self, *args):
    x = nhwc_input(self)
    by, bx = block_sizes(self)
    mode = param_choice(self, "mode", ["DCR", "CRD"], "DCR")
    n, h, w, c = x.shape
    divides(self, "the channel count", c, by * bx)
    depth = c // (by * bx)
    if mode == "DCR":
        y = x.reshape(n, h, w, by, bx, depth).permute(0, 1, 3, 2, 4, 5)
    else:
        y = x.reshape(n, h, w, depth, by, bx).permute(0, 1, 4, 2, 5, 3)
    return set_output(self, y.reshape(n, h * by, w * bx, depth))


@quant_register(OpType.DepthToSpace, "1.0")
def depthtospace_quantize(self, *args):
    QT.pass_through(self)
