"""FullyConnected: y = x·Wᵀ + b over the last axis (weights [out, in]), leading axes kept.

Quantized like Convolution (npuopt.quant.layers.quantize_linear): acc = (q_x + zp_x) ·
(W_q + zp_w)ᵀ + b_q in exact integers, then the per-channel or per-tensor output stage
with the fused activation."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import optional_constant
from .activation import apply_fused_activation


def _check_features(node, x, weights):
    if x.shape[-1] != weights.shape[1]:
        raise IRError(f"layer '{node.name}': input has {x.shape[-1]} features on its last axis, "
                      f"weights {list(weights.shape)} expect {weights.shape[1]}")


def _integer_weights(node, absmax: int):
    """(W + zp_w)ᵀ as float32 [in, out] and the accumulator bound (which also picks
    exact_matmul's float32 or float64 product), built once per stored weights."""
    consts = [node.constants[k].betensor for k in ("weights", "weights_zp") if k in node.constants]

    def make():
        w = QL.weight_values(node)
        return w.t().to(torch.float32).contiguous(), qmath.conv_bound(w, absmax)
    return QL.cached(node, f"_fc_weights_{absmax}", consts, make)


def fully_connected_quantized(self):
    x_t = self.inputs[0]
    _check_features(self, x_t.betensor, self.get_constant("weights").betensor)
    absmax = QL.shifted_absmax(x_t)
    wt, bound = _integer_weights(self, absmax)
    acc = qmath.exact_matmul(QL.shifted_input(x_t, torch.float32), wt, bound=bound)
    return QL.finish_linear(self, acc, bound)


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
    QL.quantize_linear(self, axis=0)
