"""Split along `axis` (negative: from the end) into parts of the sizes in `splits`, one top
per part (views, no copies); a single integer `splits` is a part size (the last part
takes the rest), as the tool chain's torch.split reads it.

Quantized: the same code moves the integers; every top takes the input's quantization."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, int_list


@op_register(OpType.Split, "1.0")
def split_forward(self, *args):
    x = self.inputs[0].betensor
    axis = axis_of(self, x.dim())
    splits = int_list(self, "splits")
    if isinstance(self.get_param("splits"), int) and splits[0] > 0:
        splits = [min(splits[0], x.shape[axis] - i) for i in range(0, x.shape[axis], splits[0])]
    if len(splits) != len(self.outputs) or sum(splits) != x.shape[axis]:
        raise IRError(f"layer '{self.name}': splits {splits} must have one size per top "
                      f"({len(self.outputs)}) and sum to axis {axis}'s size {x.shape[axis]}")
    parts = torch.split(x, splits, dim=axis)
    for t, part in zip(self.outputs, parts):
        t.betensor = part
    return list(parts)


@quant_register(OpType.Split, "1.0")
def split_quantize(self, *args):
    QT.pass_through(self)
