"""BatchToSpace (NHWC), SpaceToBatch's inverse: batch (y * bx + x) * N' + n holds the
pixels at offset (y, x) of every block_size_y x block_size_x block of output image n;
then crop_top/bottom/left/right are cut off.

Quantized: the same code moves the integers; the input's quantization is passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import block_sizes, divides, int_param, nhwc_input, set_output


@op_register(OpType.BatchToSpace, "1.0")
def batchtospace_forward(self, *args):
    x = nhwc_input(self)
    by, bx = block_sizes(self)
    top, bottom, left, right = (int_param(self, k, 0, minimum=0) for k in
                                ("crop_top", "crop_bottom", "crop_left", "crop_right"))
    n, h, w, c = x.shape
    divides(self, "the batch", n, by * bx)
    if top + bottom >= h * by or left + right >= w * bx:
        raise IRError(f"layer '{self.name}' (BatchToSpace): crops ({top}, {bottom}, {left}, {right}) leave no "
                      f"output of {h * by}x{w * bx}")
    y = x.reshape(by, bx, n // (by * bx), h, w, c).permute(2, 3, 0, 4, 1, 5).reshape(n // (by * bx), h * by,
                                                                                       w * bx, c)
    return set_output(self, y[:, top:h * by - bottom, left:w * bx - right, :])


@quant_register(OpType.BatchToSpace, "1.0")
def batchtospace_quantize(self, *args):
    QT.pass_through(self)
