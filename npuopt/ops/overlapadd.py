"""OverlapAdd (TensorFlow's signal.overlap_and_add): input [..., frames, frame_length]
(at least 2-D), `frame_step` (default 1, at most frame_length). Top [..., (frames - 1) *
frame_step + frame_length]: frame f is added in at offset f * frame_step. Float sums in
float32, for each output element over the frame's positions in order, as the tool chain.

Quantized, as the tool chain: the same sums of A = q + zp_in (exact integers), then
requantize(sum, M, s) into the top (`scale_value`/`shift_value`: the ratio of the top's
scale to the input's with activation_bits multipliers); the top is signed as the input
is. An integer (unscaled) input keeps the layer in float (the tool chain's quantize
function fails on one)."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import int_param


def overlap_add(node, frames: torch.Tensor) -> torch.Tensor:
    """Frames [..., F, L] added at steps of frame_step, for each output element in the order of
    the frame positions (float32 frames sum in float32; float64 ones, integers, exactly)."""
    if frames.dim() < 2:
        raise IRError(f"layer '{node.name}' (OverlapAdd): the input must be at least 2-D, got shape "
                      f"{list(frames.shape)}")
    count, length = frames.shape[-2], frames.shape[-1]
    step = int_param(node, "frame_step", 1, minimum=1)
    if step > length:
        raise IRError(f"layer '{node.name}' (OverlapAdd): frame_step {step} is larger than the frame length "
                      f"{length}")
    out = torch.zeros(frames.shape[:-2] + ((count - 1) * step + length,), dtype=frames.dtype, device=frames.device)
    starts = torch.arange(count, device=frames.device) * step
    for j in range(length):
        out[..., starts + j] += frames[..., j]
    return out


@op_register(OpType.OverlapAdd, "1.0")
def overlapadd_forward(self, *args):
    check_inputs(self, (1,))
    if self.quantized:
        return requantized_sums(self, overlap_add(self, QT.shifted(self.inputs[0])))
    self.outputs[0].betensor = overlap_add(self, computing_float(self.inputs[0].betensor))
    return self.outputs[0].betensor


def sums_rescale(node) -> Rescale:
    """What the layers that add up their input's values (OverlapAdd, SlotUpdate) quantize as
    the tool chain does: the top from calibration, signed as the input; the rescale of the
    sums of q + zp_in into it, with activation_bits multipliers. An integer (unscaled)
    input keeps the layer in float."""
    QT.check_quantized_inputs(node)
    inp, out = node.inputs[0], node.outputs[0]
    if inp.qinvariant:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): an integer (unscaled) input is kept in float")
    QT.quantize_activation(node, out, signed=inp.dtype.is_signed)
    return Rescale.from_ratio(out.scale / inp.scale, settings_of(node).activation_bits)


def requantized_sums(node, sums: torch.Tensor) -> torch.Tensor:
    """The integer sums through the layer's rescale into its top."""
    top = node.outputs[0]
    return QT.store_output(node, Rescale.read(node).apply(sums, top.zerop, top.qmin, top.qmax), top)


@quant_register(OpType.OverlapAdd, "1.0")
def overlapadd_quantize(self, *args):
    sums_rescale(self).write(self)
