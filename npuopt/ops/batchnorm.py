"""BatchNorm as the IR keeps it: y = x·weights + biases along `axis`, statistics already folded.

Quantized like a 1x1 depthwise linear layer (npuopt.quant.layers.quantize_linear with
the weights' only axis as channel axis): acc = (q_x + zp_x) · (W_q[c] + zp_w[c]) along
`axis`, z = acc + b_q[c], then the output stage with per-channel (indexed along `axis`)
or per-tensor multiplier and shift."""
import torch

from ..errors import IRError
from ..quant import layers as QL
from ..registry import OpType, op_register, quant_register
from ._layout import along_axis
from .activation import apply_fused_activation


def _checked_axis(node, x):
    axis = int(node.get_param("axis", -1))
    scale, shift = node.get_constant("weights").betensor, node.get_constant("biases").betensor
    if scale.numel() != x.shape[axis] or shift.numel() != x.shape[axis]:
        raise IRError(f"layer '{node.name}': weights/biases of {scale.numel()}/{shift.numel()} values "
                      f"for axis {axis} of size {x.shape[axis]}")
    return axis % x.dim()


def batchnorm_quantized(self):
    x_t, out_t = self.inputs[0], self.outputs[0]
    axis = _checked_axis(self, x_t.betensor)
    w = QL.weight_values(self).to(torch.float64)
    # channels last, where the output stage indexes per-channel numbers; exact in
    # float64: |A| < 2^17, |W| < 2^9
    acc = QL.shifted_input_scratch(x_t, torch.float64, "batchnorm").movedim(axis, -1).mul_(w)
    y = QL.finish_linear(self, acc, float(QL.shifted_absmax(x_t)) * float(w.abs().max()))
    out_t.betensor = y.movedim(-1, axis)
    return out_t.betensor


@op_register(OpType.BatchNorm, "1.0")
def batchnorm_forward(self, *args):
    if self.quantized:
        return batchnorm_quantized(self)
    x = self.inputs[0].betensor
    axis = _checked_axis(self, x)
    scale = self.get_constant("weights").betensor
    shift = self.get_constant("biases").betensor
    # one fused kernel, output in the input's memory layout
    out = torch.addcmul(along_axis(shift, axis, x.dim()), x, along_axis(scale, axis, x.dim()))
    out = apply_fused_activation(self, out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.BatchNorm, "1.0")
def batchnorm_quantize(self, *args):
    QL.quantize_linear(self, axis=0)
