"""TopK: the k largest (largest=true) or smallest values along `axis`, always in sorted
order, and their int32 indices (k from the param, or input 1; at most the axis size).
Ties (select_index): `last` (the default) lists equal values from the highest index
down, `first` from the lowest up; `random` is torch.topk's order.

Quantized: computed on the integers; the values take the input's quantization, the
indices are unquantized (scale 1, zp 0, qinvariant), unsigned of 16 bits (32 for
axes longer than 2^16), as the tool chain does."""
import math

import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import axis_of, bool_param, index_output_quantization, int_param, set_values_and_indices

SELECT = ["last", "first", "random"]


def _k(node, size: int) -> int:
    if len(node.inputs) > 1:
        k = node.inputs[1].betensor.reshape(-1)
        if k.numel() != 1:
            raise IRError(f"layer '{node.name}' (TopK): input 1 (k) must hold one value")
        return min(int(k[0]), size)
    return min(int_param(node, "k", minimum=0), size)


def _ties_last(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """A stable sort's indices with every run of equal values reversed (highest index first):
    position p of the run [first, last] takes the index at first + last - p."""
    n = values.shape[-1]
    pos = torch.arange(n, device=values.device).expand_as(values)
    differs = values[..., 1:] != values[..., :-1]
    edge = torch.ones_like(values[..., :1], dtype=torch.bool)
    starts, ends = torch.cat([edge, differs], -1), torch.cat([differs, edge], -1)
    first = torch.where(starts, pos, torch.zeros_like(pos)).cummax(-1).values
    last = torch.where(ends, pos, torch.full_like(pos, n)).flip(-1).cummin(-1).values.flip(-1)
    return order.gather(-1, first + last - pos)


@op_register(OpType.TopK, "1.0")
def topk_forward(self, *args):
    x = self.inputs[0].betensor
    if len(self.outputs) != 2:
        raise IRError(f"layer '{self.name}' (TopK): needs two tops (values, indices), has {len(self.outputs)}")
    axis = axis_of(self, x.dim(), default=-1)
    k = _k(self, x.shape[axis])
    largest = bool_param(self, "largest", True)
    select = param_choice(self, "select_index", SELECT, "last")
    if select == "random":
        values, idx = torch.topk(x, k, axis, largest, bool_param(self, "sorted", True))
    else:
        row = x.transpose(axis, -1)
        values, order = torch.sort(row, dim=-1, descending=largest, stable=True)
        if select == "last":
            order = _ties_last(values, order)
        values, idx = values[..., :k].transpose(axis, -1), order[..., :k].transpose(axis, -1)
    return set_values_and_indices(self, values, idx)


@quant_register(OpType.TopK, "1.0")
def topk_quantize(self, *args):
    QT.check_quantized_inputs(self)
    QT.copy_quantization(self.inputs[0], self.outputs[0])
    size = int(self.inputs[0].ir_shape[axis_of(self, len(self.inputs[0].ir_shape), default=-1)])
    index_output_quantization(self, self.outputs[1], 16 if math.log2(max(size, 1)) <= 16 else 32)
    self.params.setdefault("select_index", "last")
