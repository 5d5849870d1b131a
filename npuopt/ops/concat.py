"""Concat along `axis`.

Quantized: input i is requantized to the output's quantization,
rounding_right_shift((q_i + zp_i) * M_i, s_i) - zp_out, saturated
(scale_value=[M_i...], shift_value=[s_i...]); when every input shares one
quantization the output takes it and the layer is a copy (M_i = 1, s_i = 0).

An input of batch 1 (a Constant, e.g. a ViT class token) is broadcast over the
batch being run when the concatenation is along another axis."""
import torch

from ..quant import layers as QL
from ..registry import OpType, op_register, quant_register


def batch_broadcast(parts, axis: int):
    """Inputs of batch 1 expanded to the largest batch among them, unless the
    concatenation is along the batch axis itself."""
    batch = max(p.shape[0] for p in parts) if parts and parts[0].dim() else 1
    if axis % max(parts[0].dim(), 1) == 0 or batch == 1:
        return parts
    return [p.expand((batch,) + tuple(p.shape[1:])) if p.shape[0] == 1 else p for p in parts]


@op_register(OpType.Concat, "1.0")
def concat_forward(self, *args):
    axis = int(self.get_param("axis"))
    if self.quantized:
        out_t = self.outputs[0]
        ms, shifts = QL.get_rescale(self)
        parts = [QL.requantize_to(self, t, out_t, int(m), int(s)) for t, m, s in zip(self.inputs, ms, shifts)]
        return QL.store_output(self, torch.cat(batch_broadcast(parts, axis), dim=axis), out_t)
    out = torch.cat(batch_broadcast([t.betensor for t in self.inputs], axis), dim=axis)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Concat, "1.0")
def concat_quantize(self, *args):
    QL.check_quantized_inputs(self)
    out = self.outputs[0]
    first = self.inputs[0]
    if all((t.scale, t.zerop, t.dtype) == (first.scale, first.zerop, first.dtype) for t in self.inputs):
        QL.copy_quantization(first, out)
        QL.set_rescale_values(self, [1] * len(self.inputs), [0] * len(self.inputs))
        return
    QL.quantize_activation(self, out)
    pairs = [QL.qmath.multiplier_and_shift(float(out.scale) / float(t.scale), QL.MULTIPLIER_BITS)
             for t in self.inputs]
    QL.set_rescale_values(self, [m for m, _ in pairs], [s for _, s in pairs])
