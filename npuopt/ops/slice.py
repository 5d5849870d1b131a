"""Slice: begin/end(exclusive)/strides per axis, negative indices from the end, negative
strides reverse; the batch axis, when the IR takes it whole, follows the batch actually run.

Quantized: the same code picks the integers; the input's quantization is passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


def _axis_slice(begin, end, stride, size):
    """A positive-step slice (torch has no other) picking the same elements, and whether
    the result must be flipped to restore a negative stride's order."""
    if stride > 0:
        return slice(begin, end, stride), False
    picked = range(*slice(begin, end, stride).indices(size))
    if not picked:
        return slice(0, 0), False
    return slice(picked[-1], picked[0] + 1, -stride), True


@op_register(OpType.Slice, "1.0")
def slice_forward(self, *args):
    x = self.inputs[0].betensor
    begin, end = self.get_param("begin"), self.get_param("end")
    strides = self.get_param("strides", [1] * x.dim())
    if not len(begin) == len(end) == len(strides) == x.dim() or 0 in strides:
        raise IRError(f"layer '{self.name}': begin {begin}, end {end}, strides {strides} need one "
                      f"entry per axis ({x.dim()}) and non-zero strides")
    ir_batch = self.inputs[0].ir_shape[0] if self.inputs[0].ir_shape else x.shape[0]
    index, flips = [], []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides)):
        b, e, s = int(b), int(e), int(s)
        whole_batch = axis == 0 and range(*slice(b, e, s).indices(ir_batch)) == range(ir_batch)
        sl, flip = (slice(None), False) if whole_batch else _axis_slice(b, e, s, x.shape[axis])
        index.append(sl)
        if flip:
            flips.append(axis)
    out = x[tuple(index)]
    if flips:
        out = out.flip(flips)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Slice, "1.0")
def slice_quantize(self, *args):
    QT.pass_through(self)
