"""NonZero: the coordinates of input 0's nonzero elements, [rank, count] in C order
(ONNX's layout), and the count itself, [1]. The parser writes the tops' largest shapes
([rank, elements], [1]); the forward gives the real ones (data-dependent shapes, bounded by
the IR's), and a batch runs as one, its first row naming the sample, as the tool chain does.

Quantized, as the tool chain: the nonzero elements of the stored integers (so, with a zero
point, not the real zeros); both tops unsigned indices (scale 1, zp 0, qinvariant) of
max(activation_bits, ceil(log2(the input's largest axis))) bits."""
import math

import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import index_output_quantization


@op_register(OpType.NonZero, "1.0", data_dependent_shapes=True)
def nonzero_forward(self, *args):
    check_inputs(self, (1,))
    if len(self.outputs) != 2:
        raise IRError(f"layer '{self.name}' (NonZero): needs two tops (indices, count), has {len(self.outputs)}")
    x = self.inputs[0].betensor
    idx = torch.nonzero(x).T.contiguous()
    count = torch.tensor([idx.shape[1]], device=x.device)
    if self.quantized:
        return [QT.store_output(self, idx, self.outputs[0]), QT.store_output(self, count, self.outputs[1])]
    self.outputs[0].betensor, self.outputs[1].betensor = idx.to(torch.int32), count.to(torch.int32)
    return [t.betensor for t in self.outputs]


@quant_register(OpType.NonZero, "1.0")
def nonzero_quantize(self, *args):
    QT.check_quantized_inputs(self)
    largest = max([int(d) for d in self.inputs[0].ir_shape] + [1])
    bits = max(settings_of(self).activation_bits, math.ceil(math.log2(largest)))
    for out in self.outputs:
        index_output_quantization(self, out, bits)
