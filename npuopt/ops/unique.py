"""Unique: the distinct values of input 0 (`axis` absent or None: of its elements,
flattened; an integer: its slices along that axis), with the index of each one's first
occurrence, each element's (or slice's) index into them (flattened: [elements]), and how
often each occurs: four tops, y, indices, inverse_indices, counts (int32). `sorted`
(default true) sorts them ascending (slices lexicographically); false keeps the order in
which they first occur. The parser writes the tops' largest shapes; the forward gives the
real ones (data-dependent shapes, bounded by the IR's), a batch run as one, as the tool
chain does.

Quantized: the same on the stored integers (their order is the real values'); y takes the
input's quantization, the other tops are integers of their IR type (scale 1, zp 0)."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import axis_of, bool_param


def _axis(node, ndim: int):
    axis = node.get_param("axis", None)
    if axis is None or (isinstance(axis, str) and axis.upper() == "NONE"):
        return None
    return axis_of(node, ndim)


def unique(x: torch.Tensor, axis, keep_sorted: bool):
    """(y, indices, inverse_indices, counts), the last three int64: sorted, then (unless
    `keep_sorted`) put in the order of their first occurrences."""
    y, inverse, counts = torch.unique(x, sorted=True, return_inverse=True, return_counts=True, dim=axis)
    inverse = inverse.reshape(-1)
    positions = torch.arange(inverse.numel(), device=x.device)
    first = torch.full((counts.numel(),), inverse.numel(), dtype=torch.int64, device=x.device).scatter_reduce(
        0, inverse, positions, reduce="amin")
    if keep_sorted:
        return y, first, inverse, counts
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=x.device)
    y = y.reshape(-1)[order] if axis is None else y.index_select(axis, order)
    return y, first[order], rank[inverse], counts[order]


@op_register(OpType.Unique, "1.0", data_dependent_shapes=True)
def unique_forward(self, *args):
    check_inputs(self, (1,))
    if len(self.outputs) != 4:
        raise IRError(f"layer '{self.name}' (Unique): needs four tops (y, indices, inverse_indices, counts), "
                      f"has {len(self.outputs)}")
    x = self.inputs[0].betensor
    y, *ints = unique(x, _axis(self, x.dim()), bool_param(self, "sorted", True))
    if self.quantized:
        return [QT.store_output(self, v, t) for v, t in zip([y] + ints, self.outputs)]
    self.outputs[0].betensor = y
    for v, t in zip(ints, self.outputs[1:]):
        t.betensor = v.to(torch.int32)
    return [t.betensor for t in self.outputs]


@quant_register(OpType.Unique, "1.0")
def unique_quantize(self, *args):
    QT.check_quantized_inputs(self)
    QT.copy_quantization(self.inputs[0], self.outputs[0])
    for out in self.outputs[1:]:
        dtype = out.ir_dtype if out.ir_dtype.is_integer else out.dtype
        QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, dtype.bits, dtype.is_signed)
        out.qinvariant = True
