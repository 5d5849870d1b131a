"""Gather: slices of input 0 along `axis` picked by the integer indices of input 1
(negative ones counted from the end); the first `batch_dims` axes of both are batch
axes gathered pairwise. Top shape: data[:axis] + indices[batch_dims:] + data[axis+1:].
An index outside [-size, size) is an IRError.

Quantized: the same code moves the integers; the data's quantization is passed through."""
import math

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, batch_dims_of, check_indices, index_input, set_output


@op_register(OpType.Gather, "1.0")
def gather_forward(self, *args):
    data, indices = self.inputs[0].betensor, index_input(self)
    axis = axis_of(self, data.dim())
    bd = batch_dims_of(self, data, indices, axis)
    idx = check_indices(self, indices, data.shape[axis]).to(data.device)
    batch = math.prod(data.shape[:bd])
    inner = math.prod(data.shape[axis + 1:])
    d = data.reshape(batch, math.prod(data.shape[bd:axis]), data.shape[axis], inner)
    idx = idx.reshape(batch, 1, -1, 1).expand(batch, d.shape[1], -1, inner)
    out = d.gather(2, idx)
    shape = tuple(data.shape[:axis]) + tuple(indices.shape[bd:]) + tuple(data.shape[axis + 1:])
    if out.numel() != math.prod(shape):
        raise IRError(f"layer '{self.name}' (Gather): indices {list(indices.shape)} do not fit data "
                      f"{list(data.shape)}")
    return set_output(self, out.reshape(shape))


@quant_register(OpType.Gather, "1.0")
def gather_quantize(self, *args):
    QT.pass_through(self)
