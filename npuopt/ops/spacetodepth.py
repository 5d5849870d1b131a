"""SpaceToDepth (NHWC): every block_size x block_size patch becomes one pixel whose
channels are the patch's pixels in row-major order, each with all C channels
(TensorFlow's order: out channel = (by * bs + bx) * C + c). The parser writes
block_size_x = block_size_y; the tool chain handles no other case.

Quantized: the same code moves the integers; the input's quantization is passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import block_sizes, divides, nhwc_input, set_output


@op_register(OpType.SpaceToDepth, "1.0")
def spacetodepth_forward(self, *args):
    x = nhwc_input(self)
    by, bx = block_sizes(self)
    if by != bx:
        raise IRError(f"layer '{self.name}' (SpaceToDepth): block_size_y {by} and block_size_x {bx} must be equal")
    n, h, w, c = x.shape
    divides(self, "height", h, by)
    divides(self, "width", w, bx)
    out = x.reshape(n, h // by, by, w // bx, bx, c).permute(0, 1, 3, 2, 4, 5).reshape(n, h // by, w // bx, by * bx * c)
    return set_output(self, out)


@quant_register(OpType.SpaceToDepth, "1.0")
def spacetodepth_quantize(self, *args):
    QT.pass_through(self)
