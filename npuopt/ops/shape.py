"""Shape: the sizes of input 0's axes start..end-1 (Python slice bounds, negative from the
end), int32; the sizes the layer sees, so a larger batch shows in them. Its values set the
shapes of the layers that read them (ConstantOfShape, a Reshape's shape...): it is declared
with data-dependent shapes, and its graph runs a batch as one, as the tool chain does.

Quantized: the same sizes, int32 (scale 1, zp 0, qinvariant), as the tool chain does."""
import torch

from ..dtype import Dtype
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import int_param, set_output


@op_register(OpType.Shape, "1.0", data_dependent_shapes=True)
def shape_forward(self, *args):
    check_inputs(self, (1,))
    x = self.inputs[0].betensor
    start, end = int_param(self, "start"), int_param(self, "end")
    return set_output(self, torch.tensor(x.shape[start:end], dtype=torch.int32, device=x.device))


@quant_register(OpType.Shape, "1.0")
def shape_quantize(self, *args):
    out = self.outputs[0]
    QT.set_quantization(out, 1.0, 0, Dtype.INT32.qmin, Dtype.INT32.qmax, 32, True)
    out.qinvariant = True
