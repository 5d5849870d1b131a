"""Dtypes, integer ranges and tensor construction, by the Compass Optimizer's names."""
from typing import Optional

import numpy as np
import torch

from ..dtype import Dtype
from ..errors import NpuoptError

__all__ = [
    "Dtype", "OPT_EPSILON", "OPT_INT_MIN", "OPT_INT_MAX", "is_torch_tensor", "is_torch_tensor_with_multi_data",
    "construct_torch_tensor", "torch_tensor", "batch_construct_torch_tensor", "to_list", "nhwc2nchw", "nchw2nhwc",
    "is_signed", "is_float", "is_quant_dtype", "bits2dtype", "str2dtype", "dtype2str", "dtype2bits", "dtype2bytes",
    "dtype2nptype", "nptype2dtype", "nptype2torch_type", "torch_type2nptype", "torch_type2dtype", "dtype2torch_type",
    "bits2range", "range2bits", "dtype2range", "range2dtype", "get_round_mode_func",
    "get_round_func_according_to_dtype",
]

OPT_EPSILON = float(torch.finfo(torch.float32).eps)
OPT_INT_MIN = -(1 << 31)
OPT_INT_MAX = (1 << 31) - 1


def is_torch_tensor(var) -> bool:
    return isinstance(var, torch.Tensor)


def is_torch_tensor_with_multi_data(var) -> bool:
    return isinstance(var, torch.Tensor) and var.numel() > 1


def construct_torch_tensor(var, device=None):
    """`var` as a torch tensor on `device` (default cpu); None stays None."""
    if var is None:
        return None
    dev = device if device is not None else "cpu"
    if isinstance(var, torch.Tensor):
        return var.to(device=dev)
    return torch.tensor(var, device=dev)


torch_tensor = construct_torch_tensor


def batch_construct_torch_tensor(values, device=None):
    """construct_torch_tensor of each; a single value gives a single tensor."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    out = [construct_torch_tensor(v, device) for v in values]
    return out[0] if len(out) == 1 else out


def to_list(x):
    return x.tolist() if isinstance(x, (torch.Tensor, np.ndarray)) else list(x)


def nhwc2nchw(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 3, 1, 2)


def nchw2nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 3, 1)


def is_signed(dt: Dtype) -> bool:
    """Floats are signed, bool is not."""
    return dt.is_signed


def is_float(dt: Dtype) -> bool:
    return dt.is_float


def is_quant_dtype(dt: Dtype) -> bool:
    return dt.is_integer


_FLOAT_BY_BITS = ((16, Dtype.FP16, Dtype.BFP16), (32, Dtype.FP32, Dtype.FP32), (64, Dtype.FP64, Dtype.FP64))


def bits2dtype(bits: int, is_signed: bool, use_float: bool = False, mantissa_bits: int = 0) -> Dtype:
    """The dtype that holds `bits`-bit values: integers as the tool chain widens them
    (<=4: aligned int4, <=8: int8, <=12: aligned int12, <=16, <=32, <=64); floats with
    fewer than 10 mantissa bits at 16 bits are bfloat16 (npuopt has no 4-8-bit floats)."""
    bits = int(bits)
    if not use_float:
        return Dtype.integer(bits, bool(is_signed))
    for width, wide_mantissa, narrow_mantissa in _FLOAT_BY_BITS:
        if bits <= width:
            if bits <= 8:
                raise NpuoptError(f"bits2dtype: {bits}-bit float types are not supported by npuopt")
            return wide_mantissa if mantissa_bits >= 10 or width > 16 else narrow_mantissa
    raise NpuoptError(f"bits2dtype: no float dtype of {bits} bits")


def str2dtype(name: str) -> Dtype:
    """A dtype by its IR name ('int8', 'float32', 'aligned_int4', ...; 'float' is float32)."""
    text = str(name).strip().lower()
    return Dtype.from_name({"float": "float32", "half": "float16", "double": "float64"}.get(text, text))


def dtype2str(dt: Dtype) -> str:
    return dt.value


def dtype2bits(dt: Dtype) -> int:
    return dt.bits


def dtype2bytes(dt: Dtype) -> int:
    return dt.storage_bytes


def dtype2nptype(dt: Dtype):
    """The NumPy scalar type of `dt`'s values (bfloat16 as float32, bool as bool_)."""
    if dt is Dtype.BFP16:
        return np.float32
    if dt is Dtype.BOOL:
        return np.bool_
    return dt.numpy_storage.newbyteorder("=").type


def nptype2dtype(t) -> Dtype:
    t = np.dtype(t)
    if t == np.bool_:
        return Dtype.BOOL
    return Dtype.from_name(t.name)


def nptype2torch_type(t) -> torch.dtype:
    t = np.dtype(t)
    return torch.bool if t == np.bool_ else torch.from_numpy(np.zeros(0, dtype=t)).dtype


def torch_type2nptype(tp: torch.dtype):
    if tp == torch.bfloat16:
        return np.float32
    return torch.zeros(0, dtype=tp).numpy().dtype.type


def torch_type2dtype(tp: torch.dtype) -> Dtype:
    """The dtype of a backend type (bool reads as uint8, as the tool chain has it)."""
    return Dtype.of_torch(tp)


def dtype2torch_type(dt: Dtype) -> torch.dtype:
    """npuopt's backend type for `dt` (unsigned types wider than 8 bits are widened)."""
    return dt.torch_dtype


def bits2range(bits: int, is_signed: bool):
    """(qmin, qmax) of a `bits`-bit integer."""
    bits = int(bits)
    if is_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def range2bits(vmin, vmax, force_int: bool = False):
    """The fewest bits (and the signedness) whose range holds [vmin, vmax]; signed when
    vmin < 0 or `force_int`."""
    signed = bool(vmin < 0) or force_int
    if not signed and vmin >= 0 and vmax <= 0:
        return 0, signed  # zero bits hold the unsigned range [0, 0]
    bits = 1
    while True:
        qmin, qmax = bits2range(bits, signed)
        if vmin >= qmin and vmax <= qmax:
            return bits, signed
        bits += 1


def dtype2range(dt: Dtype):
    """(min, max) of `dt`: the integer range, or the float type's finite range."""
    if dt.is_float:
        info = torch.finfo(dt.torch_dtype)
        return float(info.min), float(info.max)
    return dt.qmin, dt.qmax


def range2dtype(vmin, vmax, force_int: bool = False):
    """(bits, dtype) of 8, 16 or 32 bits holding [vmin, vmax]; unsigned when vmin >= 0
    unless `force_int`."""
    dtype = Dtype.narrowest_holding(vmin, vmax, force_int)
    return dtype.bits, dtype


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


_ROUND_FUNCS = {"CEIL": torch.ceil, "FLOOR": torch.floor, "TRUNC": torch.trunc, "NEAREST": _round_half_away}


def get_round_mode_func(round_mode: str):
    """CEIL, FLOOR, TRUNC, NEAREST (half away from zero); anything else rounds half to even."""
    return _ROUND_FUNCS.get(str(round_mode).upper(), torch.round)


def get_round_func_according_to_dtype(round_mode: str, dtype: Optional[Dtype] = None):
    """The rounding of `round_mode` for integers up to 16 bits; wider types keep values."""
    if dtype is None or (dtype.is_integer and dtype.bits <= 16):
        return get_round_mode_func(round_mode)
    return torch.nn.Identity()
