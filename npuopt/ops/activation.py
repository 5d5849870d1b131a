"""Activation layers, and the fused activation (`with_activation`) other layers apply.

Quantized: RELU/RELU6/CLIP/LEAKYRELU rescale A = q + zp_in by s_out/s_in with the
common output stage (integer clamp; LEAKYRELU's negative side has its own
multiplier); the other methods are a lookup table `lut` of output integers
indexed by the input integer (npuopt.quant.qmath.lut_lookup)."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register


def _clip(node, x):
    return torch.clamp(x, float(node.get_param("clip_min")), float(node.get_param("clip_max")))


def _leaky(node, x):
    return F.leaky_relu(x, float(node.get_param("negative_slope_value", 0.01)))


FLOAT_ACTIVATIONS = {
    "NONE": lambda node, x: x,
    "RELU": lambda node, x: F.relu(x),
    "RELU6": lambda node, x: F.relu6(x),
    "CLIP": _clip,
    "LEAKYRELU": _leaky,
    "SIGMOID": lambda node, x: torch.sigmoid(x),
    "TANH": lambda node, x: torch.tanh(x),
    "SWISH": lambda node, x: F.silu(x),
    "SILU": lambda node, x: F.silu(x),
    "HARDSIGMOID": lambda node, x: torch.clamp(x * float(node.get_param("alpha", 1 / 6)) + float(node.get_param("beta", 0.5)), 0.0, 1.0),
    "HARDSWISH": lambda node, x: F.hardswish(x),
    "GELU": lambda node, x: F.gelu(x, approximate="tanh" if node.get_param("approximate", "none") == "tanh" else "none"),
}


def float_activation(node, x: torch.Tensor, method: str) -> torch.Tensor:
    fn = FLOAT_ACTIVATIONS.get(str(method).upper())
    if fn is None:
        raise IRError(f"layer '{node.name}': unsupported activation '{method}' "
                      f"(supported: {', '.join(sorted(FLOAT_ACTIVATIONS))})")
    return fn(node, x)


def apply_fused_activation(node, x: torch.Tensor) -> torch.Tensor:
    """The `with_activation` a Convolution, FullyConnected or Eltwise carries."""
    return float_activation(node, x, node.get_param("with_activation", "NONE"))


RESCALE_METHODS = ("RELU", "RELU6", "CLIP", "LEAKYRELU")


def activation_quantized(self):
    x_t, out_t = self.inputs[0], self.outputs[0]
    method = str(self.get_param("method")).upper()
    if method in RESCALE_METHODS:
        M, shift = QL.get_rescale(self)
        return QL.finish(self, QL.shifted_input(x_t), M, shift, out_t, method)
    y = qmath.lut_lookup(x_t.betensor, self.get_constant("lut").betensor, x_t.dtype.qmin, x_t.dtype.bits)
    return QL.store_output(self, y, out_t)


@quant_register(OpType.Activation, "1.0")
def activation_quantize(self, *args):
    method = str(self.get_param("method")).upper()
    if method not in FLOAT_ACTIVATIONS or method == "NONE":
        raise QL.Unsupported(f"layer '{self.name}': activation '{method}' has no integer form")
    QL.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    QL.quantize_activation(self, out_t)
    if method in RESCALE_METHODS:
        ratio = float(out_t.scale) / float(x_t.scale)
        QL.set_rescale(self, ratio)
        QL.prepare_activation(self, out_t, ratio, method)
        return
    st = QL.settings_of(self)
    in_bits = x_t.dtype.bits
    lut_bits = qmath.lut_bits_for(in_bits, st.lut_items_in_bits)
    lo, hi = QL.int_range(out_t)
    table = qmath.build_lut(lambda x: float_activation(self, x, method), float(x_t.scale), int(x_t.zerop),
                            x_t.dtype.qmin, in_bits, lut_bits, float(out_t.scale), int(out_t.zerop), lo, hi)
    QL.set_lut(self, table, out_t.dtype)


@op_register(OpType.Activation, "1.0")
def activation_forward(self, *args):
    if self.quantized:
        return activation_quantized(self)
    out = float_activation(self, self.inputs[0].betensor, self.get_param("method"))
    self.outputs[0].betensor = out
    return out
