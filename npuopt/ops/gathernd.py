"""GatherND: the last axis of the integer indices (input 1, length k) addresses the k
axes of input 0 that follow its first `batch_dims` (batch axes shared with the
indices); each index tuple picks the remaining sub-tensor. Top shape:
indices[:-1] + data[batch_dims + k:]. Negative components count from the end; one
out of range is an IRError.

Quantized: the same code moves the integers; the data's quantization is passed through."""
import math

import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import batch_dims_of, check_indices, index_input, set_output


@op_register(OpType.GatherND, "1.0")
def gathernd_forward(self, *args):
    data, indices = self.inputs[0].betensor, index_input(self)
    if indices.dim() < 1:
        raise IRError(f"layer '{self.name}' (GatherND): indices must have at least one axis")
    bd = batch_dims_of(self, data, indices, min(data.dim(), indices.dim() - 1))
    depth = indices.shape[-1]
    if depth < 1 or bd + depth > data.dim():
        raise IRError(f"layer '{self.name}' (GatherND): index tuples of {depth} for data {list(data.shape)} "
                      f"with batch_dims {bd}")
    sizes = data.shape[bd:bd + depth]
    flat = torch.zeros(indices.shape[:-1], dtype=torch.int64, device=data.device)
    for j, size in enumerate(sizes):
        flat = flat * size + check_indices(self, indices[..., j], size, f"indices[..., {j}]").to(data.device)
    batch = math.prod(data.shape[:bd])
    d = data.reshape(batch, math.prod(sizes), -1)
    out = d[torch.arange(batch, device=data.device).reshape(-1, 1), flat.reshape(batch, -1)]
    return set_output(self, out.reshape(tuple(indices.shape[:-1]) + tuple(data.shape[bd + depth:])))


@quant_register(OpType.GatherND, "1.0")
def gathernd_quantize(self, *args):
    QT.pass_through(self)
