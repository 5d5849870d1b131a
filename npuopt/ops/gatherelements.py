"""GatherElements (ONNX, torch.gather): out[..., i, ...] = data[..., indices[..., i, ...], ...]
along `axis`; indices have the data's rank and no larger size on the other axes.
Negative indices count from the end; one outside [-size, size) is an IRError.

Quantized: the same code moves the integers; the data's quantization is passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, check_indices, index_input, set_output


@op_register(OpType.GatherElements, "1.0")
def gatherelements_forward(self, *args):
    data, indices = self.inputs[0].betensor, index_input(self)
    axis = axis_of(self, data.dim(), default=0)
    if indices.dim() != data.dim() or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape))
                                          if a != axis):
        raise IRError(f"layer '{self.name}' (GatherElements): indices {list(indices.shape)} do not fit data "
                      f"{list(data.shape)} along axis {axis}")
    idx = check_indices(self, indices, data.shape[axis]).to(data.device)
    return set_output(self, data.gather(axis, idx))


@quant_register(OpType.GatherElements, "1.0")
def gatherelements_quantize(self, *args):
    QT.pass_through(self)
