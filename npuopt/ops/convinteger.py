"""ConvInteger: ONNX's integer convolution as the parser writes it. An integer input
(NHWC, uint8), integer weights [O, kh, kw, C/group] (uint8 or int8), int32 biases
(zeros from the parser), Convolution's window params and the zero points
`x_zero_point` and `w_zero_point`; the int32 top holds
    sum (x - x_zero_point) * (w - w_zero_point) + biases,
the pads counting as x_zero_point (a shifted zero), computed exactly.

Quantized, as the tool chain quantizes it: nothing is scaled. The input takes scale 1
and zero point -x_zero_point (the tool chain's reader quantizes a float value fed
there as f + x_zero_point), the weights keep their integers and type with scale 1 and
zero point -w_zero_point, the biases become int32 with x_zero_point * sum(w -
w_zero_point) taken off, the top is int32 with scale 1, zero point 0 (all qinvariant),
and no rescale is written: acc = sum (w + zp_w) * x' + biases, x' the input padded with
-zp_x, clamped to the top's range. An input holding a pre-quantized source's integers (a
QuantizeLinear's: ir/compat.py) keeps its grid, whose zero point must be -x_zero_point."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ..tensor import PyTensor
from ._conv import conv_float, exact_bound, geometry
from ._prequant import int32_quantization, integer_operands, integer_top, source_integers, zero_point


def _weights(node):
    """The integer weights constant; float weights are an IRError."""
    c = node.get_constant("weights")
    if not c.dtype.is_integer:
        raise IRError(f"layer '{node.name}' (ConvInteger): weights must be integers (uint8 or int8), got "
                      f"{c.dtype.value}")
    return c


def _window(node, x: torch.Tensor):
    biases = node.constants.get("biases")
    return geometry(node, x, _weights(node).betensor, 2, biases=None if biases is None else biases.betensor,
                    integer=True)


def _biases(node) -> torch.Tensor:
    """The biases as float64 (zeros where the layer has none)."""
    if "biases" not in node.constants:
        return torch.zeros(_weights(node).betensor.shape[0], dtype=torch.float64)
    return node.constants["biases"].betensor.detach().to(torch.float64).reshape(-1)


@op_register(OpType.ConvInteger, "1.0")
def convinteger_forward(self, *args):
    (x,) = integer_operands(self, 1)
    c = _weights(self)
    w = _window(self, x)
    if self.quantized:
        weights, pad = QT.integer_weights(c), -float(self.inputs[0].zerop)
    else:
        x = x - zero_point(self, "x_zero_point", self.inputs[0].dtype)
        weights, pad = c.betensor.to(torch.float64) - zero_point(self, "w_zero_point", c.dtype), 0.0
    exact_bound(self, weights, max(int(x.abs().max()) if x.numel() else 0, int(abs(pad))))
    acc = conv_float(x, weights, None, w, 2, pad_value=pad) + _biases(self).to(x.device)
    return integer_top(self, acc)


@quant_register(OpType.ConvInteger, "1.0")
def convinteger_quantize(self, *args):
    """As the tool chain's: the integers kept, nothing scaled (module docstring)."""
    if settings_of(self).quantize_method_for_activation.per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (ConvInteger): per-channel activations are not supported")
    QT.check_quantized_inputs(self)
    x_t, c = self.inputs[0], _weights(self)
    x_zp, w_zp = zero_point(self, "x_zero_point", x_t.dtype), zero_point(self, "w_zero_point", c.dtype)
    if source_integers(x_t) and x_t.zerop != -x_zp:  # the source's grid stays; its zero point pads
        raise QT.Unsupported(f"layer '{self.name}' (ConvInteger): x_zero_point {x_zp} is not the zero point "
                             f"{-x_t.zerop} of the source's integers it reads")
    folded = _biases(self).cpu() - (c.betensor.to(torch.float64).cpu() - w_zp).reshape(c.ir_shape[0], -1).sum(1) * x_zp
    c.scale, c.zerop, c.qbits, c.qmin, c.qmax, c.qinvariant = 1.0, -w_zp, c.dtype.bits, c.dtype.qmin, c.dtype.qmax, True
    b = self.constants.setdefault("biases", PyTensor("biases", torch.zeros(c.ir_shape[0], dtype=torch.int32)))
    b.betensor = folded.clamp_(QT.INT32_MIN, QT.INT32_MAX).to(torch.int32).to(c.betensor.device)
    b.dtype, b.scale, b.zerop, b.qbits, b.qinvariant = Dtype.INT32, 1.0, 0, 32, True
    b.qmin, b.qmax = qmath.integer_range(32, True)
    if not source_integers(x_t):  # (a pre-quantized source's integers keep their grid)
        # the zero point the tool chain gives the input (its padding value); not qinvariant, as its
        # reader reads it: a float value fed there is quantized to f + x_zero_point
        x_t.scale, x_t.zerop, x_t.qinvariant = 1.0, -x_zp, False
    int32_quantization(self.outputs[0])
