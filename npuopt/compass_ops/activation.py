"""OPT's ops/activation.py helpers (the fused `with_activation` of Convolution, Eltwise,
...; the lookup-table activation `unknown_*`) and the forward and quantize functions of
its activation method modules (ops/relu.py, ops/tanh.py, ...), on npuopt's arithmetic
(npuopt/ops/activation.py): float, npuopt's float activation; quantized, npuopt's
integer form of the method (a rescale for RELU, RELU6, CLIP, LEAKYRELU, PRELU, a lookup
table for the others). A method's output is signed as in OPT (e.g. SIGMOID unsigned,
TANH signed, CLIP when clip_min < 0), and always when the layer forces integer dtypes."""
import torch
import torch.nn.functional as F

from ..errors import PluginError
from ..logger import OPT_WARN
from ..ops import activation as npu
from ..quant import fields
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ._base import in_npuopt_form, not_approximated

# the with_activation methods whose output zero point OPT may fold into the biases
with_activation_allow_merge_out_zerop_to_bias = ("none", "clip", "relu", "relu6")


# whether the output is signed, for the methods whose params decide it
def clip_out_signed(self) -> bool:
    return float(self.get_param("clip_min")) < 0


def hardsigmoid_out_signed(self) -> bool:
    return float(self.get_param("clip_min", optional=True, default_value=0)) < 0


def threshold_out_signed(self) -> bool:
    return float(self.get_param("alpha")) < 0


# ---- the fused activation ---------------------------------------------------------
def with_activation_out_is_signed(self) -> bool:
    """Whether the layer's output is signed, by its with_activation (NONE, CLIP, RELU,
    RELU6, LEAKYRELU, PRELU: the ones the tool chain fuses)."""
    method = npu.fused_method(self)
    return clip_out_signed(self) if method == "CLIP" else method not in ("RELU", "RELU6")


@in_npuopt_form
def apply_with_activation(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The layer's with_activation on x; quantized, x is the accumulator (plus args[0],
    when given alone, as its zero point), rescaled into the output by the layer's
    scale/shift."""
    if kwargs:
        raise PluginError(f"layer '{self.name}' ({self.type}): apply_with_activation's {', '.join(kwargs)} "
                          f"(the chip's remain_shift) is not supported by npuopt")
    if not self.quantized:
        return npu.apply_fused_activation(self, x)
    acc = x.to(torch.float64) + (torch.as_tensor(args[0], dtype=torch.float64) if len(args) == 1 else 0.0)
    out = self.outputs[0]
    return QT.store_output(self, npu.fused_forward(self, acc, Rescale.read(self), out), out)


@in_npuopt_form
def apply_with_activation_quantize(self, _x_qinvariant, *args) -> None:
    """The with_activation's own integer params (CLIP bounds, LEAKYRELU/PRELU slopes) once
    the output is quantized; the layer's rescale and tensors stay as they are."""
    npu.quantize_fused(self, self.outputs[0])


# ---- a lookup table of the layer's function (attrs lambda_func) ----------------------
@in_npuopt_form
def unknown_quantize(self, *args) -> None:
    """Quantize the output (signed unless attrs['out_signed'] is false) and tabulate
    attrs['lambda_func'] as the layer's `lut` (less attrs['mirror_offset'], added back
    in output integers)."""
    inp, out = self.inputs[0], self.outputs[0]
    QT.quantize_activation(self, out, signed=bool(self.get_attrs("out_signed", optional=True, default_value=True)))
    func = self.get_attrs("lambda_func", optional=True, default_value=None)
    if func is not None:
        offset = float(self.get_attrs("mirror_offset", optional=True, default_value=0.0))
        table = npu.build_lut(self, lambda x: func(x) - offset, inp, out) + round(offset * out.scale)
        fields.write_lut(self, table.clamp(out.qmin, out.qmax), out.dtype)
    out.qinvariant = False


@in_npuopt_form
def unknown_activation(self, *args) -> torch.Tensor:
    """Quantized: the `lut` looked up by the input integers; float: attrs['lambda_func']
    of the input (without one, the input itself)."""
    inp, out = self.inputs[0], self.outputs[0]
    if self.quantized:
        return QT.store_output(self, npu.lut_forward(self, inp, out), out)
    func = self.get_attrs("lambda_func", optional=True, default_value=None)
    if func is None:
        OPT_WARN(f"layer '{self.name}' ({self.type}): no lambda_func for its float forward; the input is passed on")
    out.betensor = inp.betensor if func is None else func(inp.betensor.float())
    return out.betensor


# ---- OPT's activation methods ----------------------------------------------------------
def _method(method: str, signed):
    """OPT's forward and quantize functions of one method (npuopt's name); `signed`: the
    output's signedness, or a function of the layer giving it."""
    @in_npuopt_form
    def forward(self, *args) -> torch.Tensor:
        inp, out = self.inputs[0], self.outputs[0]
        if not self.quantized:
            out.betensor = npu.float_activation(self, inp.betensor, method)
        elif method in npu.RESCALE_METHODS:
            QT.store_output(self, npu.rescaling_forward(self, method, QT.shifted(inp), Rescale.read(self), out), out)
        else:
            QT.store_output(self, npu.lut_forward(self, inp, out), out)
        return out.betensor

    @in_npuopt_form
    def quantize(self, *args) -> None:
        inp, out = self.inputs[0], self.outputs[0]
        QT.quantize_activation(self, out, signed=(signed(self) if callable(signed) else signed) or self.force_dtype_int)
        if method in npu.RESCALE_METHODS:
            Rescale.from_ratio(out.scale / inp.scale, settings_of(self).multiplier_bits).write(self)
            npu.quantize_rescaling(self, method, out)
        else:
            table = npu.build_lut(self, lambda x: npu.float_activation(self, x, method), inp, out)
            fields.write_lut(self, table, out.dtype)
        out.qinvariant = False
    return forward, quantize


relu, relu_quantize = _method("RELU", False)
relu6, relu6_quantize = _method("RELU6", False)
clip, clip_quantize = _method("CLIP", clip_out_signed)
leakyrelu, leakyrelu_quantize = _method("LEAKYRELU", True)
prelu, prelu_quantize = _method("PRELU", True)
sigmoid_forward, sigmoid_quantize = _method("SIGMOID", False)
tanh, tanh_quantize = _method("TANH", True)
elu, elu_quantize = _method("ELU", True)
selu, selu_quantize = _method("SELU", True)
celu, celu_quantize = _method("CELU", True)
hardswish, hardswish_quantize = _method("HARDSWISH", True)
hardsigmoid, hardsigmoid_quantize = _method("HARDSIGMOID", hardsigmoid_out_signed)
softplus, softplus_quantize = _method("SOFTPLUS", False)
softsign, softsign_quantize = _method("SOFTSIGN", True)
silu, silu_quantize = _method("SILU", True)
swish, swish_quantize = _method("SWISH", True)
mish, mish_quantize = _method("MISH", True)
gelu, gelu_quantize = _method("GELU", True)
shrink, shrink_quantize = _method("SHRINK", True)
thresholdedrelu, thresholdedrelu_quantize = _method("THRESHOLDEDRELU", threshold_out_signed)
unknown_approx = sigmoid_approx = tanh_approx = silu_approx = not_approximated


# CRELU (relu(x) and relu(-x) concatenated along param `axis`, 0 by default), which
# npuopt's Activation does not have: RELU's arithmetic on both halves
def _crelu_axis(self) -> int:
    return int(self.get_param("axis", optional=True, default_value=0))


@in_npuopt_form
def crelu(self, *args) -> torch.Tensor:
    inp, out = self.inputs[0], self.outputs[0]
    if not self.quantized:
        out.betensor = torch.cat((F.relu(inp.betensor), F.relu(-inp.betensor)), dim=_crelu_axis(self))
        return out.betensor
    x, rescale = QT.shifted(inp), Rescale.read(self)
    halves = [npu.rescaling_forward(self, "RELU", v, rescale, out) for v in (x, -x)]
    return QT.store_output(self, torch.cat(halves, dim=_crelu_axis(self)), out)


crelu_quantize = relu_quantize
