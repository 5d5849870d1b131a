"""Filter: the slices of each data input along `axis` picked by the nonzero entries of the
selector (the last input; positions along its first axis) moved to the front, the rest
zero, each top the shape of its input; the last top holds how many were picked (a 0-d
int32), a length later layers may take as a shape. `num` is the number of data inputs.
Declared with data-dependent shapes: its graph runs a batch as one, as the tool chain
does (a selector along the batch axis picks among the samples).

Quantized: the same code moves the integers (the selector's stored integers decide, the
rest is the integer 0, as the tool chain does); each top takes its input's quantization,
the count is an unsigned integer of max(16, activation_bits) bits (signed with
force_dtype_int), scale 1."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, int_param


def _data(node):
    num = int_param(node, "num", minimum=1)
    if len(node.inputs) != num + 1 or len(node.outputs) != num + 1:
        raise IRError(f"layer '{node.name}' (Filter): num={num} needs {num + 1} inputs (the data, then the "
                      f"selector) and {num + 1} tops, the IR gives {len(node.inputs)} and {len(node.outputs)}")
    return node.inputs[:num]


@op_register(OpType.Filter, "1.0", data_dependent_shapes=True)
def filter_forward(self, *args):
    data = _data(self)
    selector = self.inputs[-1].betensor
    picked = torch.nonzero(selector.reshape(selector.shape[0], -1) if selector.dim() else selector.reshape(1))[:, 0]
    for t, out in zip(data, self.outputs):
        x = t.betensor
        axis = axis_of(self, x.dim())
        if picked.numel() and (int(picked.max()) >= x.shape[axis] or picked.numel() > x.shape[axis]):
            raise IRError(f"layer '{self.name}' (Filter): the selector picks {picked.numel()} slices up to "
                          f"position {int(picked.max())} of axis {axis} of size {x.shape[axis]}")
        front = x.index_select(axis, picked.to(x.device))
        y = torch.zeros_like(x)
        y.narrow(axis, 0, front.shape[axis]).copy_(front)
        out.betensor = y
    count = torch.tensor(picked.numel(), device=selector.device)
    if self.quantized:
        QT.store_output(self, count, self.outputs[-1])
    else:
        self.outputs[-1].betensor = count.to(torch.int32)
    return [t.betensor for t in self.outputs]


@quant_register(OpType.Filter, "1.0")
def filter_quantize(self, *args):
    QT.check_quantized_inputs(self)
    for t, out in zip(_data(self), self.outputs):
        QT.copy_quantization(t, out)
    bits, signed = max(16, settings_of(self).activation_bits), bool(self.force_dtype_int)
    dtype = Dtype.integer(bits, signed)
    count = self.outputs[-1]
    QT.set_quantization(count, 1.0, 0, dtype.qmin, dtype.qmax, bits, signed)
    count.qinvariant = True
