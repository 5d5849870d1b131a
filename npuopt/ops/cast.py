"""Cast: `to_dtype` (the parser's int8, uint8, int16, uint16, int32, uint32, float32,
float16, bfloat16, float8_e5m2, float8_e4m3fn), `clip_mode` SATURATION (default) or
TRUNCATION, `ignore_scale_zp` (read by the integer forward).

Float, as the tool chain's float forward: to a float type the value is kept as float32;
to an integer type, SATURATION truncates toward zero and clamps to the type's range,
TRUNCATION converts as C does (toward zero, then wrapped modulo 2^bits).

Quantized, in the tool chain's forms:
* with `scale_value`/`shift_value` (a float input cast to an integer type of at most 16
  bits): out = requantize(q + zp_in, M, s) into the top (scale 1, zp 0, qinvariant; the
  rescale rounds half to even where the float cast truncates);
* without: SATURATION out = clamp(q + zp_in - zp_out, range of to_dtype) (zero points
  taken as 0 when `ignore_scale_zp`), TRUNCATION out = q wrapped into to_dtype.
npuopt, as the tool chain, writes the second form as a pass-through (the input's
quantization, `to_dtype` its integer type) for an integer input, and also for a cast
between float types. A cast of a float to a 32-bit integer stays float: the tool chain's
forward does not round rescaled values wider than 16 bits."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import bool_param
from ._unary import operands

INTEGER_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32"]
FLOAT_TYPES = ["float32", "float16", "bfloat16", "float8_e5m2", "float8_e4m3fn"]
REQUANTIZED_BITS = 16  # the tool chain rounds rescaled values only up to 16-bit types
RESCALE_BITS = 16      # asked of scale_approximation (capped at 15) for 1 / scale_in


def cast_params(node):
    """(to_dtype name, clip mode, ignore_scale_zp), checked before anything runs."""
    to = param_choice(node, "to_dtype", INTEGER_TYPES + FLOAT_TYPES)
    clip = param_choice(node, "clip_mode", ["SATURATION", "TRUNCATION"], "SATURATION")
    return to, clip, bool_param(node, "ignore_scale_zp", False)


def to_integer(x: torch.Tensor, dtype: Dtype, clip: str) -> torch.Tensor:
    """Integers (or floats truncated toward zero) into `dtype`: clamped (SATURATION) or
    wrapped modulo 2^bits (TRUNCATION), as int64."""
    v = x.to(torch.int64) if x.is_floating_point() or x.dtype != torch.int64 else x
    if clip == "SATURATION":
        return torch.clamp(v, dtype.qmin, dtype.qmax)
    return torch.remainder(v - dtype.qmin, 1 << dtype.bits) + dtype.qmin


@op_register(OpType.Cast, "1.0")
def cast_forward(self, *args):
    to, clip, ignore_zp = cast_params(self)
    inp, out = operands(self)
    if not self.quantized:
        if to in FLOAT_TYPES:
            out.betensor = inp.betensor.to(torch.float32)
        else:
            dtype = Dtype.from_name(to)
            out.betensor = to_integer(inp.betensor, dtype, clip).to(dtype.torch_dtype)
        return out.betensor
    r = Rescale.read(self, required=False)
    if r is not None:
        if out.dtype.bits > REQUANTIZED_BITS or not out.dtype.is_integer:
            raise IRError(f"layer '{self.name}' (Cast): a rescale into {out.dtype.value} (wider than "
                          f"{REQUANTIZED_BITS} bits, left unrounded by the tool chain) is not supported yet")
        return QT.store_output(self, r.apply(QT.shifted(inp), out.zerop, out.qmin, out.qmax), out)
    if to in FLOAT_TYPES:
        raise IRError(f"layer '{self.name}' (Cast): a quantized cast to {to} is not supported yet")
    q = inp.betensor.to(torch.int64)
    if clip == "SATURATION" and not ignore_zp:
        q = q + int(inp.zerop) - int(out.zerop)
    return QT.store_output(self, to_integer(q, Dtype.from_name(to), clip), out)


@quant_register(OpType.Cast, "1.0")
def cast_quantize(self, *args):
    to, _, _ = cast_params(self)
    QT.check_quantized_inputs(self)
    inp, out = operands(self)
    if not inp.ir_dtype.is_float or to in FLOAT_TYPES:
        QT.copy_quantization(inp, out)
        self.params["to_dtype"] = inp.dtype.value
        return
    dtype = Dtype.from_name(to)
    if dtype.bits > REQUANTIZED_BITS:
        raise QT.Unsupported(f"layer '{self.name}' (Cast to {to}): the tool chain's forward leaves values "
                             f"rescaled into more than {REQUANTIZED_BITS} bits unrounded; npuopt keeps it in float")
    QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, dtype.bits, dtype.is_signed)
    out.qinvariant = True
    Rescale.from_ratio(1.0 / inp.scale, RESCALE_BITS).write(self)
    self.params["ignore_scale_zp"] = abs(float(inp.scale) - 1.0) <= qmath.FLOAT32_EPS
    self.params["clip_mode"] = "SATURATION"
