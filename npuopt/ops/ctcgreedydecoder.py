"""CTCGreedyDecoder (TensorFlow's ctc_greedy_decoder, batch-major): input 0 the class scores
[batch, T, C], input 1 each sample's sequence length (integers; 0 or less means T). Per
sample the best class of each of its first L steps (the first on ties), with
`merge_repeated` (default true) runs of one class merged into one, then the blank class
C - 1 dropped; the labels fill the top [batch, N, 1, 1] from the start, the rest holds the
top type's largest value (2^31 - 1 for the parser's int32), as the tool chain writes it.

Quantized as the tool chain: the best class of the integer scores (their order is the real
values'), the top unsigned 16-bit (int16 with force_dtype_int) labels of scale 1, zero
point 0, padded with that type's largest value."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._integer import fit_top, integer_top
from ._movement import bool_param

LABEL_BITS = 16  # the quantized top's bits (at least; the activation bits when wider)


def _check(node):
    """(scores [B, T, C], sequence lengths [B] as int64, the top's label count N)."""
    check_inputs(node, (2,))
    x, lengths = (t.betensor for t in node.inputs)
    if x.dim() != 3:
        raise IRError(f"layer '{node.name}' ({node.type}): takes scores [batch, time, classes], got "
                      f"{list(x.shape)}")
    if lengths.numel() not in (1, x.shape[0]):
        raise IRError(f"layer '{node.name}' ({node.type}): takes one sequence length per sample, got "
                      f"{lengths.numel()} for a batch of {x.shape[0]}")
    shape = list(node.outputs[0].ir_shape)
    if len(shape) != 4 or shape[2:] != [1, 1] or shape[1] < x.shape[1]:
        raise IRError(f"layer '{node.name}' ({node.type}): the top must be [batch, N, 1, 1] with N at least the "
                      f"{x.shape[1]} time steps, the IR says {shape}")
    return x, lengths.reshape(-1).to(torch.int64).expand(x.shape[0]), shape[1]


def decode(x: torch.Tensor, lengths: torch.Tensor, merge: bool, labels: int, fill: int) -> torch.Tensor:
    """The greedy labels of every sample, [B, labels, 1, 1], padded with `fill`."""
    batch, steps, classes = x.shape
    best = torch.argmax(x, dim=-1)
    lengths = torch.where((lengths <= 0) | (lengths > steps), steps, lengths)
    keep = torch.arange(steps, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)
    if merge:
        keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    keep &= best != classes - 1
    out = torch.full((batch, labels), fill, dtype=torch.int64, device=x.device)
    for b in range(batch):
        found = best[b][keep[b]]
        out[b, :found.numel()] = found
    return out.reshape(batch, labels, 1, 1)


@op_register(OpType.CTCGreedyDecoder, "1.0")
def ctcgreedydecoder_forward(self, *args):
    x, lengths, labels = _check(self)
    out = self.outputs[0]
    dtype = out.dtype if out.dtype.is_integer else Dtype.INT32
    return fit_top(out, decode(x, lengths, bool_param(self, "merge_repeated", True), labels, dtype.qmax), dtype)


@quant_register(OpType.CTCGreedyDecoder, "1.0")
def ctcgreedydecoder_quantize(self, *args):
    QT.check_quantized_inputs(self)
    bits = max(LABEL_BITS, settings_of(self).activation_bits)
    integer_top(self.outputs[0], Dtype.integer(bits, bool(self.force_dtype_int)))
