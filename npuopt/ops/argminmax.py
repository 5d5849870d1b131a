"""ArgMinMax: the index of the largest (method MAX) or smallest (MIN) value along
`axis`, the axis kept with size 1; ties give the first index, or the last with
select_last_index. The top holds int32 indices.

Quantized: computed on the integers (monotonic in the real values); the top is
unquantized indices (scale 1, zp 0, qinvariant) in an unsigned type of
max(16, activation_bits) bits, as the tool chain does."""
import torch

from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import axis_of, bool_param, index_output_quantization


@op_register(OpType.ArgMinMax, "1.0")
def argminmax_forward(self, *args):
    x = self.inputs[0].betensor
    axis = axis_of(self, x.dim(), default=-1)
    method = param_choice(self, "method", ["MAX", "MIN"])
    last = bool_param(self, "select_last_index", False)
    if last:
        x = x.flip(axis)
    pick = torch.argmax if method == "MAX" else torch.argmin
    idx = pick(x, dim=axis, keepdim=True)
    if last:
        idx = x.shape[axis] - 1 - idx
    out = self.outputs[0]
    if self.quantized:
        return QT.store_output(self, idx, out)
    out.betensor = idx.to(torch.int32)
    return out.betensor


@quant_register(OpType.ArgMinMax, "1.0")
def argminmax_quantize(self, *args):
    QT.check_quantized_inputs(self)
    index_output_quantization(self, self.outputs[0], max(16, settings_of(self).activation_bits))
