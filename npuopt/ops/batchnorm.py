"""BatchNorm as the IR keeps it: y = x·weights + biases along `axis`, statistics already folded.

Quantized like a 1x1 depthwise linear layer (ops/_linear.py, weights [C]): with
the channel axis moved last, acc = fl32(fl32(q_x * (q_w + zp_w)) + biases) (in
float32, as the tool chain computes it; exact while |acc| < 2^24), then the
per-channel or per-tensor rescale with the fused activation."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..registry import OpType, op_register, quant_register
from ._layout import along_axis
from ._linear import quantize_linear
from .activation import apply_fused_activation, fused_forward


def _checked_axis(node, shape):
    """The channel axis (non-negative), checked against the input `shape` and the constants."""
    axis, ndim = node.get_param("axis", -1), len(shape)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise IRError(f"layer '{node.name}' ({node.type}): axis {axis} is out of range for a {ndim}-D input")
    scale, shift = node.get_constant("weights").betensor, node.get_constant("biases").betensor
    if scale.numel() != shape[axis] or shift.numel() != shape[axis]:
        raise IRError(f"layer '{node.name}' ({node.type}): weights/biases of {scale.numel()}/{shift.numel()} "
                      f"values for axis {axis} of size {shape[axis]}")
    return axis % ndim


def batchnorm_quantized(self):
    x_t, out = self.inputs[0], self.outputs[0]
    axis = _checked_axis(self, x_t.betensor.shape)
    w = QT.integer_weights(self.get_constant("weights")).to(torch.float32)
    b = QT.shifted(self.get_constant("biases"), torch.float32)
    acc = x_t.betensor.movedim(axis, -1).to(torch.float32) * w + b
    y = fused_forward(self, acc, Rescale.read(self), out)
    return QT.store_output(self, y.movedim(-1, axis), out)


@op_register(OpType.BatchNorm, "1.0")
def batchnorm_forward(self, *args):
    if self.quantized:
        return batchnorm_quantized(self)
    x = self.inputs[0].betensor
    axis = _checked_axis(self, x.shape)
    scale = self.get_constant("weights").betensor
    shift = self.get_constant("biases").betensor
    # one fused kernel, output in the input's memory layout
    out = torch.addcmul(along_axis(shift, axis, x.dim()), x, along_axis(scale, axis, x.dim()))
    out = apply_fused_activation(self, out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.BatchNorm, "1.0")
def batchnorm_quantize(self, *args):
    # the tool chain reads a non-negative axis (as its parser writes it)
    self.params["axis"] = _checked_axis(self, self.inputs[0].ir_shape)
    quantize_linear(self)
