"""FullyConnected: y = x·Wᵀ + b over the last axis (weights [out, in]), leading axes kept.

Quantized like Convolution (ops/_linear.py): acc = q_x · (q_w + zp_w)ᵀ + biases in
exact integers (the input zero point is folded into the biases), then the
per-channel or per-tensor rescale with the fused activation."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, patches_register, quant_register
from ._layout import optional_constant
from ._linear import linear_output, quantize_linear
from .activation import apply_fused_activation


def _check_features(node, x, weights):
    if weights.dim() != 2 or x.shape[-1] != weights.shape[1]:
        raise IRError(f"layer '{node.name}' ({node.type}): input has {x.shape[-1]} features on its last axis, "
                      f"weights {list(weights.shape)} expect [num_output, {x.shape[-1]}]")
    num_output = node.get_param("num_output", weights.shape[0])
    if num_output != weights.shape[0]:
        raise IRError(f"layer '{node.name}' ({node.type}): num_output={num_output} but the weights have "
                      f"{weights.shape[0]} rows")
    biases = optional_constant(node, "biases")
    if biases is not None and biases.numel() != weights.shape[0]:
        raise IRError(f"layer '{node.name}' ({node.type}): biases have {biases.numel()} values for "
                      f"{weights.shape[0]} output features")


def _integer_weights(node, absmax: int):
    """(q_w + zp_w)ᵀ as float32 [in, out] and the accumulator bound. The bound is kept per
    stored weights; the matrix is made from the stored integers at each call (a few
    percent of the product's time): kept beside them it held a large model's weights a
    second time, in four times their bytes."""
    w = QT.shifted(node.get_constant("weights"), torch.float32)
    return w.t(), QT.cached_by_weights(node, "_fc_bound", (absmax,), lambda: qmath.l1_bound(w, absmax))


def fully_connected_quantized(self):
    x_t = self.inputs[0]
    _check_features(self, x_t.betensor, self.get_constant("weights").betensor)
    absmax = QT.int_absmax(x_t)
    wt, bound = _integer_weights(self, absmax)
    if x_t.dtype.is_minifloat:  # fp8 values: their products and sums are exact in float64 (quant/minifloat.py)
        return linear_output(self, torch.matmul(x_t.betensor.to(torch.float64), wt.to(torch.float64)))
    acc = qmath.exact_matmul(x_t.betensor.to(torch.float32), wt, bound=bound)
    return linear_output(self, acc)


@op_register(OpType.FullyConnected, "1.0")
def fully_connected_forward(self, *args):
    if self.quantized:
        return fully_connected_quantized(self)
    x = self.inputs[0].betensor
    weights = self.get_constant("weights").betensor
    _check_features(self, x, weights)
    out = apply_fused_activation(self, F.linear(x, weights, optional_constant(self, "biases")))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.FullyConnected, "1.0")
def fully_connected_quantize(self, *args):
    quantize_linear(self)


@patches_register(OpType.FullyConnected, "1.0")
def fully_connected_patches(node, x, rows, real):
    """The input features of output rows `rows` ([1, rows, features]): a FullyConnected
    layer's one group."""
    return real(x.reshape(-1, x.shape[-1])[rows]).unsqueeze(0)
