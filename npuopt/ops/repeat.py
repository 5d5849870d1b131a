"""Repeat: element i along `axis` of input 0 repeated repeats[i] times (input 1, one
count per element; without `axis`, over the flattened input), then zero-filled up to
the top's IR size along that axis (the parser's max_dim).

Quantized: the same code moves the integers and the fill is the integer 0, as the tool
chain does; the input's quantization is passed through."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, integers, set_output


@op_register(OpType.Repeat, "1.0")
def repeat_forward(self, *args):
    x, counts = self.inputs[0].betensor, self.inputs[1].betensor
    if self.get_param("axis", None) is None:
        x, counts, axis = x.reshape(-1), counts.reshape(-1), 0
    else:
        axis = axis_of(self, x.dim())
    counts = counts.reshape(-1)
    if counts.numel() != x.shape[axis]:
        raise IRError(f"layer '{self.name}' (Repeat): {counts.numel()} repeat counts for an axis of {x.shape[axis]}")
    counts = integers(self, counts, "repeat counts")
    if (counts < 0).any():
        raise IRError(f"layer '{self.name}' (Repeat): repeat counts must not be negative")
    out = torch.repeat_interleave(x, counts.to(x.device), dim=axis)
    ir_shape = self.outputs[0].ir_shape
    if ir_shape and len(ir_shape) == out.dim():
        room = int(ir_shape[axis]) - out.shape[axis]
        if room < 0:
            raise IRError(f"layer '{self.name}' (Repeat): the counts sum to {out.shape[axis]}, more than the top's "
                          f"{ir_shape[axis]} along axis {axis}")
        out = F.pad(out, [0, 0] * (out.dim() - 1 - axis) + [0, room])
    return set_output(self, out)


@quant_register(OpType.Repeat, "1.0")
def repeat_quantize(self, *args):
    QT.pass_through(self)
