"""Compress: the slices of input 0 along `axis` whose entry in the condition (input 1,
1-D) is nonzero, in order; a condition longer than the axis is cut to it, a shorter one
selects none past its end. The parser writes it with a constant condition; one computed
at run time gives a top whose shape follows the data (bounded by the IR's), a batch run
as one, as the tool chain does.

Quantized: the same code moves the integers (the condition's stored integers decide);
the top takes input 0's quantization."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import axis_of, set_output


@op_register(OpType.Compress, "1.0", data_dependent_shapes=True)
def compress_forward(self, *args):
    check_inputs(self, (2,))
    x, condition = self.inputs[0].betensor, self.inputs[1].betensor
    if condition.dim() != 1:
        raise IRError(f"layer '{self.name}' (Compress): the condition (input 1) must be 1-D, "
                      f"got shape {list(condition.shape)}")
    axis = axis_of(self, x.dim())
    keep = torch.nonzero(condition[:x.shape[axis]]).reshape(-1).to(x.device)
    out = x.index_select(axis, keep)
    return QT.store_output(self, out, self.outputs[0]) if self.quantized else set_output(self, out)


@quant_register(OpType.Compress, "1.0")
def compress_quantize(self, *args):
    QT.check_quantized_inputs(self)
    QT.copy_quantization(self.inputs[0], self.outputs[0])
