"""ReverseSequence: along `time_axis`, the first `lengths[b]` elements of each batch item b
(along `batch_axis`) in reverse order, the rest as they are. `lengths` is input 1 (one
integer per batch item; absent: the whole time axis). A lengths tensor of another size
than the batch (the parser writes one of the IR's batch, npuopt may run more samples at
once) gives every item its first value, as the tool chain does; lengths past the time
axis are the time axis.

Quantized: the same code moves the integers; the top takes input 0's quantization."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, integers


def reversed_order(node, x: torch.Tensor) -> torch.Tensor:
    """x reversed as the layer's params and lengths input say."""
    if len(node.inputs) not in (1, 2) or len(node.outputs) != 1:
        raise IRError(f"layer '{node.name}' ({node.type}): takes 1 or 2 inputs and 1 output, the IR gives "
                      f"{len(node.inputs)} and {len(node.outputs)}")
    batch_axis, time_axis = axis_of(node, x.dim(), "batch_axis", 0), axis_of(node, x.dim(), "time_axis", 1)
    if batch_axis == time_axis:
        raise IRError(f"layer '{node.name}' ({node.type}): batch_axis and time_axis are both {batch_axis}")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if len(node.inputs) == 2:
        lengths = integers(node, node.inputs[1].betensor.reshape(-1), "the sequence lengths (input 1)")
        if lengths.numel() == 0 or bool((lengths < 0).any()):
            raise IRError(f"layer '{node.name}' ({node.type}): sequence lengths must be non-negative, one per "
                          f"batch item, got {lengths.tolist()}")
        if lengths.numel() != batch:
            lengths = lengths[:1].expand(batch)
    else:
        lengths = torch.full((batch,), steps, dtype=torch.int64)
    lengths = lengths.clamp(max=steps).to(x.device)
    t = torch.arange(steps, device=x.device)
    order = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)   # [batch, steps]
    moved = x.movedim((batch_axis, time_axis), (0, 1))
    out = moved[torch.arange(batch, device=x.device)[:, None], order]
    return out.movedim((0, 1), (batch_axis, time_axis))


@op_register(OpType.ReverseSequence, "1.0")
def reversesequence_forward(self, *args):
    out = reversed_order(self, self.inputs[0].betensor)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.ReverseSequence, "1.0")
def reversesequence_quantize(self, *args):
    QT.pass_through(self)
