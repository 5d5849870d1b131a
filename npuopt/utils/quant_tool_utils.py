"""Linear quantization helpers by the Compass Optimizer's names, on npuopt.quant.qmath."""
import math
from collections import namedtuple

import torch

from ..errors import NpuoptError
from ..logger import OPT_WARN
from ..tensor import PyTensor
from ..quant import qmath
from ..registry import OpType
from .dtype_utils import (batch_construct_torch_tensor, bits2dtype, construct_torch_tensor, dtype2range,
                          get_round_mode_func, range2dtype, torch_type2dtype)
from ..dtype import Dtype

__all__ = [
    "QuantMode", "QuantType", "SHIFT_DTYPE", "ABSORB_INPUT_SCALE_OP", "OP_ONLY_CHANGE_SHAPE",
    "get_linear_quant_params_from_tensor", "linear_quantize_clip", "linear_dequantize",
    "get_scale_approximation_params", "linear_requantize", "linear_requantize_floor", "cosine_distance",
    "unify_shifts_for_aiff_with_per_n_channel_quant", "align_shape_by_padding",
]

SHIFT_DTYPE = Dtype.INT8
# layers whose quantize folds the input scale into their own rescale
ABSORB_INPUT_SCALE_OP = [OpType.Convolution, OpType.FullyConnected, OpType.BatchNorm]
# layers that only move values: their output keeps the input's quantization
OP_ONLY_CHANGE_SHAPE = [OpType.Reshape, OpType.Permute, OpType.Transpose, OpType.Squeeze, OpType.Tile,
                        OpType.Repeat, OpType.Split, OpType.Slice, OpType.StridedSlice, OpType.SpaceToDepth,
                        OpType.DepthToSpace, OpType.SpaceToBatch, OpType.BatchToSpace, OpType.Crop, OpType.Pad]


class QuantMode:
    """The quantize_method_* names: per_{tensor,channel,block}_{symmetric_{full,restricted}_range,asymmetric}."""
    Mode = namedtuple("Mode", ["name", "is_per_channel", "is_per_block", "is_asymmetric", "is_full_range"])

    @classmethod
    def make_mode(cls, is_per_channel, is_per_block, is_asymmetric, is_full_range) -> str:
        granularity = "per_channel" if is_per_channel else "per_block" if is_per_block else "per_tensor"
        if is_asymmetric:
            return granularity + "_asymmetric"
        return granularity + ("_symmetric_full_range" if is_full_range else "_symmetric_restricted_range")

    @classmethod
    def mode_names(cls):
        return [cls.make_mode(c, b, a, f) for c, b in ((False, False), (True, False), (False, True))
                for a, f in ((False, False), (False, True), (True, True))]

    @classmethod
    def default_mode(cls) -> str:
        return cls.mode_names()[0]

    @classmethod
    def _parse(cls, mode_name: str) -> "QuantMode.Mode":
        name = str(mode_name).lower()
        if name not in cls.mode_names():
            raise NpuoptError(f"'{mode_name}' is not a quantize method (known: {', '.join(cls.mode_names())})")
        return cls.Mode(name, name.startswith("per_channel"), name.startswith("per_block"),
                        name.endswith("asymmetric"), not name.endswith("restricted_range"))

    @classmethod
    def is_valid(cls, mode_name) -> bool:
        return str(mode_name).lower() in cls.mode_names()

    @classmethod
    def is_per_channel(cls, mode_name) -> bool:
        return cls._parse(mode_name).is_per_channel

    @classmethod
    def is_per_block(cls, mode_name) -> bool:
        return cls._parse(mode_name).is_per_block

    @classmethod
    def is_per_tensor(cls, mode_name) -> bool:
        return not cls._parse(mode_name).is_per_channel

    @classmethod
    def is_asymmetric(cls, mode_name) -> bool:
        return cls._parse(mode_name).is_asymmetric

    @classmethod
    def is_symmetric(cls, mode_name) -> bool:
        return not cls._parse(mode_name).is_asymmetric

    @classmethod
    def is_full_range(cls, mode_name) -> bool:
        return cls._parse(mode_name).is_full_range

    @classmethod
    def _with(cls, mode_name, **changes) -> str:
        m = cls._parse(mode_name)._replace(**changes)
        return cls.make_mode(m.is_per_channel, m.is_per_block, m.is_asymmetric, m.is_full_range)

    @classmethod
    def to_per_channel(cls, mode_name):
        return cls._with(mode_name, is_per_channel=True, is_per_block=False)

    @classmethod
    def to_per_tensor(cls, mode_name):
        return cls._with(mode_name, is_per_channel=False, is_per_block=False)

    @classmethod
    def to_per_block(cls, mode_name):
        return cls._with(mode_name, is_per_channel=False, is_per_block=True)

    @classmethod
    def to_symmetric(cls, mode_name):
        return cls._with(mode_name, is_asymmetric=False, is_full_range=False)

    @classmethod
    def to_asymmetric(cls, mode_name):
        return cls._with(mode_name, is_asymmetric=True, is_full_range=True)

    @classmethod
    def to_full_range(cls, mode_name):
        return cls._with(mode_name, is_full_range=True)

    @classmethod
    def to_restricted_range(cls, mode_name):
        return cls._with(mode_name, is_full_range=False)


class QuantType:
    """The quant_type names whose dtypes npuopt has: (activation, weight, bias) dtypes
    of each; a float activation type makes it a float (or weight-only) quantization."""
    _DTYPES = {
        "w8a8": ("int8", "int8", "int32"), "w16a16": ("int16", "int16", "int64"),
        "w4": ("float16", "aligned_int4", "float32"), "w8": ("float16", "int8", "float32"),
        "w4afp16": ("float16", "aligned_int4", "float32"), "w8afp16": ("float16", "int8", "float32"),
        "w4abfp16": ("bfloat16", "aligned_int4", "float32"), "w8abfp16": ("bfloat16", "int8", "float32"),
        "fp16": ("float16", "float16", "float32"), "bf16": ("bfloat16", "bfloat16", "float32"),
        "bfp16": ("bfloat16", "bfloat16", "float32"),
    }

    @classmethod
    def _types(cls, name: str):
        key = str(name).lower()
        if key not in cls._DTYPES:
            raise NpuoptError(f"quant_type '{name}' is not one npuopt knows ({', '.join(cls._DTYPES)})")
        return cls._DTYPES[key]

    @classmethod
    def is_float(cls, name: str) -> bool:
        return Dtype(cls._types(name)[0]).is_float

    @classmethod
    def activation_type(cls, name: str) -> str:
        return cls._types(name)[0]

    @classmethod
    def weight_type(cls, name: str) -> str:
        return cls._types(name)[1]

    @classmethod
    def bias_type(cls, name: str) -> str:
        return cls._types(name)[2]

    @staticmethod
    def _to_Dtype(name_or_dtype) -> Dtype:
        return name_or_dtype if isinstance(name_or_dtype, Dtype) else Dtype.from_name(name_or_dtype)


def get_linear_quant_params_from_tensor(x, quant_mode: str, bits: int, is_signed: bool):
    """(scale, zerop, qmin, qmax, dtype) of PyTensor `x` from its calibrated range
    (x.min/x.max, or x.min_key_axis/x.max_key_axis per channel along x.key_axis), in the
    IR's convention q = round(f * scale - zerop): npuopt.quant.qmath.linear_quant_params.
    scale is a float32 tensor, zerop an int32 tensor (per channel: 1-D)."""
    mode = QuantMode._parse(quant_mode)
    if int(bits) <= 0:
        raise NpuoptError(f"get_linear_quant_params_from_tensor: bits must be positive, got {bits}")
    if mode.is_per_block:
        raise NpuoptError(f"get_linear_quant_params_from_tensor: '{quant_mode}' (per block) is not supported here")
    dev = x.betensor.device
    if mode.is_per_channel and x.key_axis is not None:
        lo, hi = x.min_key_axis, x.max_key_axis
    else:
        lo, hi = x.min, x.max
    lo = lo.float() if isinstance(lo, torch.Tensor) else float(lo)
    hi = hi.float() if isinstance(hi, torch.Tensor) else float(hi)
    scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, int(bits), not mode.is_asymmetric,
                                                      mode.is_full_range, bool(is_signed))
    scale = torch.as_tensor(scale, dtype=torch.float32, device=dev)
    zp = torch.as_tensor(zp, device=dev).to(torch.int32)
    return scale, zp, qmin, qmax, bits2dtype(bits, is_signed)


def _along(t: torch.Tensor, key_axis, dims: int) -> torch.Tensor:
    if key_axis is None:
        return t
    return t.reshape([-1 if d == key_axis else 1 for d in range(dims)])


def linear_quantize_clip(x, scale, zero_point, clamp_min, clamp_max, key_axis=None,
                         round_func=get_round_mode_func("ROUND_TO_EVEN")):
    """clamp(round(scale * x - zero_point), clamp_min, clamp_max), NaN -> 0, as float32
    (or x's integer type when that holds the clamp range). scale/zero_point lie along
    key_axis when given. With the default rounding this is qmath.quantize."""
    dev = x.device if isinstance(x, torch.Tensor) else None
    x_t, s, z, lo, hi = batch_construct_torch_tensor([x, scale, zero_point, clamp_min, clamp_max], device=dev)
    s, z = _along(s, key_axis, x_t.dim()), _along(z, key_axis, x_t.dim())
    if round_func is torch.round:
        y = qmath.quantize(x_t, s, z, lo, hi)
    else:
        y = torch.clamp(round_func(s * x_t.float() - z), lo, hi).float()
        y = torch.nan_to_num(y, nan=0.0)
    return _keep_integer_type(y, x_t.dtype, lo, hi)


def _keep_integer_type(y: torch.Tensor, x_type: torch.dtype, lo, hi) -> torch.Tensor:
    """y in x's type when x is an integer type whose range holds [lo, hi]."""
    if x_type.is_floating_point or x_type == torch.bool:
        return y
    xmin, xmax = dtype2range(torch_type2dtype(x_type))
    if xmin <= float(torch.as_tensor(lo).min()) and xmax >= float(torch.as_tensor(hi).max()):
        return y.to(x_type)
    return y


def linear_dequantize(x, scale, zero_point, key_axis=None):
    """(x + zero_point) / scale: qmath.dequantize (float32)."""
    dev = x.device if isinstance(x, torch.Tensor) else None
    x_t, s, z = batch_construct_torch_tensor([x, scale, zero_point], device=dev)
    return qmath.dequantize(x_t, _along(s, key_axis, x_t.dim()), _along(z, key_axis, x_t.dim()))


def get_scale_approximation_params(fp32_scale_value, mult_bits, limit=False, mult_bits_ceil=15, shift_bits_ceil=31,
                                   force_shift_positive=False):
    """(multiplier, multiplier dtype, shift, shift dtype) with multiplier * 2^-shift ~=
    the scale: qmath.scale_approximation. Numbers come back as Python floats, tensors as
    float32 tensors, as the Compass Optimizer returns them; the multiplier dtype is
    uint8 up to 8 multiplier bits, else uint16; the shift dtype the signed one of 8/16/32
    bits holding the shifts."""
    bits = int(mult_bits.max()) if isinstance(mult_bits, torch.Tensor) else int(mult_bits)
    mult, shift = qmath.scale_approximation(fp32_scale_value, bits, limit, mult_bits_ceil, shift_bits_ceil,
                                            force_shift_positive)
    mult_type = bits2dtype(8 if bits <= 8 else 16, False)
    if isinstance(mult, torch.Tensor):
        _, shift_type = range2dtype(int(shift.min()), int(shift.max()), force_int=True)
        return mult.to(torch.float32), mult_type, shift.to(torch.float32), shift_type
    _, shift_type = range2dtype(shift, shift, force_int=True)
    return float(mult), mult_type, float(shift), shift_type


def linear_requantize(x, multiplier, shift_bits, zero_point, clamp_min, clamp_max, key_axis=None,
                      round_func=get_round_mode_func("ROUND_TO_EVEN")):
    """clamp(round(x * multiplier * 2^-shift_bits) - zero_point, clamp_min, clamp_max) in
    float64 (or x's integer type when that holds the clamp range); NaN -> 0. With the
    default rounding (half to even) this is qmath.requantize."""
    dev = x.device if isinstance(x, torch.Tensor) else None
    x_t, m, s, z, lo, hi = batch_construct_torch_tensor([x, multiplier, shift_bits, zero_point, clamp_min,
                                                         clamp_max], device=dev)
    dims = x_t.dim()
    m, s, z = _along(m, key_axis, dims), _along(s, key_axis, dims), _along(z, key_axis, dims)
    if round_func is torch.round:
        y = qmath.requantize(x_t, m, s.to(torch.int64), z, lo, hi)
    else:
        y = torch.clamp(round_func(x_t.double() * qmath.shift_factor(m, s.to(torch.int64), x_t.device)) - z,
                        lo, hi).double()
    y = torch.nan_to_num(y, nan=0.0)
    return _keep_integer_type(y, x_t.dtype, lo, hi)


def linear_requantize_floor(x, multiplier, shift_bits, zero_point, clamp_min, clamp_max, key_axis=None):
    """As linear_requantize, but the shift is an integer arithmetic shift (rounds down)
    of round(x * multiplier); negative shifts shift left."""
    dev = x.device if isinstance(x, torch.Tensor) else None
    x_t, m, s, z, lo, hi = batch_construct_torch_tensor([x, multiplier, shift_bits, zero_point, clamp_min,
                                                         clamp_max], device=dev)
    dims = x_t.dim()
    m, s, z = _along(m, key_axis, dims), _along(s, key_axis, dims).long(), _along(z, key_axis, dims)
    prod = torch.round(x_t.double() * m).long()
    y = torch.where(s >= 0, prod >> s.clamp(min=0), prod << (-s).clamp(min=0))
    y = torch.clamp(y - z, lo, hi).double()
    return _keep_integer_type(y, x_t.dtype, lo, hi)


def align_shape_by_padding(x: torch.Tensor, y: torch.Tensor):
    """x and y zero-padded at the end of each axis to a common shape (the one with fewer
    axes gets leading axes of 1 first); returned with the one of more axes first."""
    a, b = (y, x) if x.dim() < y.dim() else (x, y)
    b = b.reshape([1] * (a.dim() - b.dim()) + list(b.shape))
    shape = [max(m, n) for m, n in zip(a.shape, b.shape)]

    def pad(t):
        widths = [w for d in reversed(range(t.dim())) for w in (0, shape[d] - t.shape[d])]
        return torch.nn.functional.pad(t, widths)
    return pad(a), pad(b)


def cosine_distance(a, b) -> float:
    """Cosine similarity of two tensors flattened (1.0 when both are all zero)."""
    x = construct_torch_tensor(a).double().flatten()
    y = construct_torch_tensor(b).double().flatten().to(x.device)
    denom = float(x.norm() * y.norm())
    if denom == 0.0:
        return 1.0 if float(x.norm() + y.norm()) == 0.0 else 0.0
    return float((x * y).sum()) / denom


def unify_shifts_for_aiff_with_per_n_channel_quant(node, xt, xt_q_mode: str, xt_q_bits: int, xt_signed: bool,
                                                   rescales_calc_func, initial_group: int = 0,
                                                   max_scale=32767.):
    """Quantize PyTensor `xt` per group of channels along its key_axis (`initial_group`
    groups, <1: one per channel; the groups' ranges merged from min_key_axis/max_key_axis)
    and return the (multiplier, type, shift, type) of rescales_calc_func(xt). With the
    layer's unify_shifts_for_aiff the channels share one shift (qmath.unify_shifts, at most
    `max_scale`); while that rounds a multiplier to 0, the groups are halved and tried
    again (a warning says how many channels then share a scale)."""
    bits = node.get_attrs("multiplier_bits", optional=True, default_value=node.attrs["q_bits_activation"])
    lo_all, hi_all = xt.min_key_axis, xt.max_key_axis
    channels = lo_all.numel()
    groups = first = channels if initial_group < 1 else min(initial_group, channels)
    mode = QuantMode.to_per_channel(xt_q_mode)
    while True:
        size = math.ceil(channels / groups)
        pad = groups * size - channels
        merged = PyTensor("per_n_channel_ranges")
        merged.key_axis = 0
        merged.min_key_axis = torch.nn.functional.pad(lo_all, (0, pad)).reshape(-1, size).min(dim=1).values
        merged.max_key_axis = torch.nn.functional.pad(hi_all, (0, pad)).reshape(-1, size).max(dim=1).values
        scale, zp, xt.qmin, xt.qmax, xt.dtype = get_linear_quant_params_from_tensor(merged, mode, xt_q_bits, xt_signed)
        xt.scale = scale.repeat_interleave(size)[:channels]
        xt.zerop = zp.repeat_interleave(size)[:channels]
        mult, mult_type, shift, shift_type = get_scale_approximation_params(
            rescales_calc_func(xt), bits, force_shift_positive=node.force_shift_positive)
        if not node.attrs["unify_shifts_for_aiff"]:
            break
        mult, shift = qmath.unify_shifts(mult.long(), shift.long(), int(max_scale))
        mult_type, shift_type = Dtype.UINT16, SHIFT_DTYPE
        if int(mult.min()) > 0 or groups == 1:
            break
        groups >>= 1
    if groups != first:
        OPT_WARN(f"layer '{node.name}' ({node.type}): its rescales differ too much across channels for one shared "
                 f"shift; {size} channels share each scale (per-{size}-channel quantization)")
    return mult, mult_type, shift, shift_type
