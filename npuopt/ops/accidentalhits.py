"""AccidentalHits (TensorFlow's compute_accidental_hits): input 0 the true classes
[rows, num_true], input 1 the sampled candidates [num_sampled] (integers). Every pair
(row d, position t, candidate s) where true[d, t] equals sampled[s], in the order of d,
then t, then s, gives d to top 0 and s to top 1; top 2 ([1]) counts them. Tops 0 and 1
have the IR's length (the parser writes min(rows * num_true, 32768)): the pairs past it
are dropped, the rest is 0. The layer spans the batch (its rows), and its count is data
that later layers may take as a shape, so it is declared with shapes that follow the
data: a graph holding one runs a batch as one, as the tool chain does.

Quantized: the same on the stored integers; the tops are unscaled integers, tops 0 and 1
of max(16, the bits holding the rows or the candidates) bits, the count of
max(16, activation_bits), unsigned (signed with force_dtype_int), as the tool chain."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import index_output_quantization

MIN_BITS = 16


def _checked(node):
    check_inputs(node, (2,))
    if len(node.outputs) != 3:
        raise IRError(f"layer '{node.name}' (AccidentalHits): needs three tops (indices, ids, count), has "
                      f"{len(node.outputs)}")
    true, sampled = node.inputs[0].betensor, node.inputs[1].betensor
    if true.dim() != 2 or sampled.dim() != 1:
        raise IRError(f"layer '{node.name}' (AccidentalHits): true classes must be 2-D and sampled candidates 1-D, "
                      f"got {list(true.shape)} and {list(sampled.shape)}")
    return true.to(torch.int64), sampled.to(torch.int64)


@op_register(OpType.AccidentalHits, "1.0", data_dependent_shapes=True)
def accidentalhits_forward(self, *args):
    true, sampled = _checked(self)
    length = int(self.outputs[0].ir_shape[0])
    d, _, s = torch.nonzero(true[:, :, None] == sampled[None, None, :], as_tuple=True)
    count = min(d.numel(), length)
    rows, ids = (torch.zeros(length, dtype=torch.int64, device=true.device) for _ in range(2))
    rows[:count], ids[:count] = d[:count], s[:count]
    values = [rows, ids, torch.tensor([count], dtype=torch.int64, device=true.device)]
    if self.quantized:
        return [QT.store_output(self, v, t) for v, t in zip(values, self.outputs)]
    for v, t in zip(values, self.outputs):
        t.betensor = v.to(torch.int32)
    return [t.betensor for t in self.outputs]


@quant_register(OpType.AccidentalHits, "1.0")
def accidentalhits_quantize(self, *args):
    signed = bool(self.force_dtype_int)
    for inp, out in zip(self.inputs, self.outputs[:2]):
        held = Dtype.narrowest_holding(0, int(inp.ir_shape[0]), force_int=signed).bits
        index_output_quantization(self, out, max(MIN_BITS, held), signed)
    index_output_quantization(self, self.outputs[2], max(MIN_BITS, settings_of(self).activation_bits), signed)
