"""Concat along `axis`.

Quantized: input i is requantized to the output's quantization,
round_half_even((q_i + zp_i) * M_i * 2^-s_i) - zp_out, saturated (scale_value=[M_i...],
shift_value=[s_i...]); when every input shares one quantization the output takes it
and the layer stores no multipliers (a copy).

An input of batch 1 (a Constant, e.g. a ViT class token) is broadcast over the
batch being run when the concatenation is along another axis."""
import torch

from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of


def batch_broadcast(parts, axis: int):
    """Inputs of batch 1 expanded to the largest batch among them, unless the
    concatenation is along the batch axis itself."""
    batch = max(p.shape[0] for p in parts) if parts and parts[0].dim() else 1
    if axis % max(parts[0].dim(), 1) == 0 or batch == 1:
        return parts
    return [p.expand((batch,) + tuple(p.shape[1:])) if p.shape[0] == 1 else p for p in parts]


@op_register(OpType.Concat, "1.0")
def concat_forward(self, *args):
    axis = axis_of(self, self.inputs[0].betensor.dim())
    if self.quantized:
        out_t = self.outputs[0]
        branches = BranchRescales.read(self, len(self.inputs))
        if branches is None:
            parts = [t.betensor for t in self.inputs]
        else:
            shifts = branches.shifts if isinstance(branches.shifts, list) else [branches.shifts] * len(self.inputs)
            parts = [qmath.requantize(QT.shifted(t), m, s, out_t.zerop, out_t.qmin, out_t.qmax)
                     for t, m, s in zip(self.inputs, branches.multipliers, shifts)]
        return QT.store_output(self, torch.cat(batch_broadcast(parts, axis), dim=axis), out_t)
    out = torch.cat(batch_broadcast([t.betensor for t in self.inputs], axis), dim=axis)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Concat, "1.0")
def concat_quantize(self, *args):
    QT.check_quantized_inputs(self)
    out = self.outputs[0]
    first = self.inputs[0]
    if all((t.scale, t.zerop, t.dtype, t.qmin, t.qmax) == (first.scale, first.zerop, first.dtype, first.qmin,
                                                          first.qmax) for t in self.inputs):
        QT.copy_quantization(first, out)
        return
    QT.quantize_activation(self, out)
    bits = settings_of(self).multiplier_bits
    rescales = [Rescale.from_ratio(out.scale / t.scale, bits) for t in self.inputs]
    BranchRescales([r.multiplier for r in rescales], [r.shift for r in rescales], rescales[0].multiplier_type,
                   [r.shift_type for r in rescales]).write(self)
