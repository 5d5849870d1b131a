"""The IR's dtypes: names, widths, integer ranges, and how they are stored."""
from enum import Enum

import numpy as np
import torch

from .errors import IRError


class Dtype(Enum):
    FP32 = "float32"
    FP16 = "float16"
    BFP16 = "bfloat16"
    FP64 = "float64"
    INT4 = "aligned_int4"
    UINT4 = "aligned_uint4"
    INT8 = "int8"
    UINT8 = "uint8"
    INT12 = "aligned_int12"
    UINT12 = "aligned_uint12"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    UINT32 = "uint32"
    INT64 = "int64"
    UINT64 = "uint64"
    BOOL = "bool"
    FP8_E4M3FN = "float8_e4m3fn"   # the scaled minifloat formats of quant/minifloat.py: quantized, not float
    FP8_E5M2 = "float8_e5m2"
    FP4_E2M1FN = "float4_e2m1fn"   # one byte per value in the .bin

    @classmethod
    def from_name(cls, name: str) -> "Dtype":
        """A dtype by its IR name; `int4`/`uint4`/`int12`/`uint12` are read as the tool
        chain's aligned_* spellings."""
        text = _ALIASES.get(str(name), str(name))
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise IRError(f"unknown dtype '{name}' (known: {known})") from None

    @classmethod
    def integer(cls, bits: int, signed: bool) -> "Dtype":
        """The narrowest integer dtype holding `bits` bits, as the tool chain picks it
        (2-4 bits: aligned_int4, 5-8: int8, 9-12: aligned_int12, 13-16: int16, ...)."""
        for d in cls:
            if d.is_integer and d.is_signed == signed and d.bits >= bits:
                return d
        raise IRError(f"no {'signed' if signed else 'unsigned'} integer dtype of {bits} bits")

    @classmethod
    def of_torch(cls, tp: torch.dtype) -> "Dtype":
        """The dtype of a backend type (bool reads as uint8, as the tool chain has it)."""
        if tp == torch.bool:
            return cls.UINT8
        if tp == torch.bfloat16:
            return cls.BFP16
        return cls.from_name(np.dtype(torch.zeros(0, dtype=tp).numpy().dtype).name)

    @classmethod
    def narrowest_holding(cls, vmin, vmax, force_int: bool = False) -> "Dtype":
        """The 8-, 16- or 32-bit integer dtype holding [vmin, vmax]; unsigned when
        vmin >= 0 unless `force_int`."""
        signed = bool(vmin < 0) or force_int
        for bits in (8, 16):
            d = cls.integer(bits, signed)
            if d.qmin <= vmin and vmax <= d.qmax:
                return d
        return cls.integer(32, signed)

    @property
    def is_float(self) -> bool:
        return self in (Dtype.FP32, Dtype.FP16, Dtype.BFP16, Dtype.FP64)

    @property
    def is_integer(self) -> bool:
        return not self.is_float and not self.is_minifloat and self is not Dtype.BOOL

    @property
    def is_quantized(self) -> bool:
        """The dtype of a quantized tensor: integers, or a scaled fp8 format."""
        return self.is_integer or self.is_minifloat

    @property
    def is_minifloat(self) -> bool:
        """A scaled fp8 or fp4 format: a quantized tensor whose values are real * scale
        on the format's grid (quant/minifloat.py), not integers."""
        return self in (Dtype.FP8_E4M3FN, Dtype.FP8_E5M2, Dtype.FP4_E2M1FN)

    @property
    def is_signed(self) -> bool:
        return self.is_float or self.is_minifloat or self.value.replace("aligned_", "").startswith("int")

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def qmin(self) -> int:
        if self.is_minifloat:
            return -self.qmax
        return -(1 << (self.bits - 1)) if self.is_signed else 0

    @property
    def qmax(self) -> int:
        if self.is_minifloat:
            return _MINIFLOAT_LARGEST[self]
        return (1 << (self.bits - 1)) - 1 if self.is_signed else (1 << self.bits) - 1

    @property
    def storage_bytes(self) -> int:
        """Bytes per element in the .bin: aligned int4 takes one byte, aligned int12 two."""
        return _NP_STORAGE_BYTES[self]

    @property
    def numpy_storage(self) -> np.dtype:
        """NumPy dtype used to read/write raw bytes (bfloat16 is handled as uint16)."""
        return np.dtype(_NP_STORAGE[self]).newbyteorder("<")

    @property
    def torch_dtype(self) -> torch.dtype:
        """Backend dtype for values of this type; unsigned types wider than 8 bits widen."""
        return _TORCH[self]

    def __str__(self) -> str:
        return self.value


_ALIASES = {"int4": "aligned_int4", "uint4": "aligned_uint4", "int12": "aligned_int12",
            "uint12": "aligned_uint12"}
_BITS = {
    Dtype.FP32: 32, Dtype.FP16: 16, Dtype.BFP16: 16, Dtype.FP64: 64,
    Dtype.INT4: 4, Dtype.UINT4: 4, Dtype.INT8: 8, Dtype.UINT8: 8, Dtype.INT12: 12, Dtype.UINT12: 12,
    Dtype.INT16: 16, Dtype.UINT16: 16, Dtype.INT32: 32, Dtype.UINT32: 32,
    Dtype.INT64: 64, Dtype.UINT64: 64, Dtype.BOOL: 8, Dtype.FP8_E4M3FN: 8, Dtype.FP8_E5M2: 8,
    Dtype.FP4_E2M1FN: 4,
}
_MINIFLOAT_LARGEST = {Dtype.FP8_E4M3FN: 448, Dtype.FP8_E5M2: 57344, Dtype.FP4_E2M1FN: 6}
_NP_STORAGE = {
    Dtype.FP32: "f4", Dtype.FP16: "f2", Dtype.BFP16: "u2", Dtype.FP64: "f8",
    Dtype.INT4: "i1", Dtype.UINT4: "u1", Dtype.INT8: "i1", Dtype.UINT8: "u1", Dtype.INT12: "i2", Dtype.UINT12: "u2",
    Dtype.INT16: "i2", Dtype.UINT16: "u2", Dtype.INT32: "i4", Dtype.UINT32: "u4",
    Dtype.INT64: "i8", Dtype.UINT64: "u8", Dtype.BOOL: "u1", Dtype.FP8_E4M3FN: "u1", Dtype.FP8_E5M2: "u1",
    Dtype.FP4_E2M1FN: "u1",
}
_NP_STORAGE_BYTES = {d: np.dtype(v).itemsize for d, v in _NP_STORAGE.items()}
_TORCH = {
    Dtype.FP32: torch.float32, Dtype.FP16: torch.float16, Dtype.BFP16: torch.bfloat16,
    Dtype.FP64: torch.float64, Dtype.INT4: torch.int8, Dtype.UINT4: torch.uint8,
    Dtype.INT12: torch.int16, Dtype.UINT12: torch.int32,
    Dtype.INT8: torch.int8, Dtype.UINT8: torch.uint8, Dtype.INT16: torch.int16,
    Dtype.UINT16: torch.int32, Dtype.INT32: torch.int32, Dtype.UINT32: torch.int64,
    Dtype.INT64: torch.int64, Dtype.UINT64: torch.int64, Dtype.BOOL: torch.bool,
    Dtype.FP8_E4M3FN: torch.float32, Dtype.FP8_E5M2: torch.float32,   # the format's values, exactly
    Dtype.FP4_E2M1FN: torch.float32,
}
_FP8_TORCH = {Dtype.FP8_E4M3FN: torch.float8_e4m3fn, Dtype.FP8_E5M2: torch.float8_e5m2}
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # float4_e2m1fn's magnitudes by code (the sign is bit 3)


def fit_float(value: torch.Tensor, dtype: Dtype) -> torch.Tensor:
    """float32 values rounded to the nearest of float dtype `dtype` (round half to even),
    clamped to its finite range first (infinities stay), as the tool chain stores a
    float16/bfloat16 tensor; float32 values of other dtypes as they are."""
    if dtype not in (Dtype.FP16, Dtype.BFP16):
        return value
    limit = torch.finfo(dtype.torch_dtype).max
    v = value.to(torch.float32)
    v = torch.where(torch.isinf(v), v, v.clamp(-limit, limit))
    return v.to(dtype.torch_dtype).to(torch.float32)


def bytes_to_tensor(raw: np.ndarray, dtype: Dtype, shape) -> torch.Tensor:
    """Turn raw little-endian bytes into a backend tensor of `dtype` and `shape`. A
    writable `raw` the caller hands over becomes the tensor's memory where the types
    allow (no second copy of a large model's weights); a read-only one is copied."""
    arr = np.frombuffer(raw, dtype=dtype.numpy_storage).reshape(shape)
    if dtype is Dtype.FP4_E2M1FN:
        codes = torch.from_numpy(arr.astype(np.int64))
        magnitude = torch.tensor(FP4_VALUES)[codes & 7]
        return torch.where(codes & 8 > 0, -magnitude, magnitude)
    if dtype.is_minifloat:
        return torch.from_numpy(arr.copy()).view(_FP8_TORCH[dtype]).to(torch.float32)
    if dtype is Dtype.BFP16:  # reinterpret the bits: a conversion would canonicalize NaN payloads
        return torch.from_numpy(arr.view("<i2").astype(np.int16)).view(torch.bfloat16)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=not arr.flags.writeable)
    return torch.from_numpy(arr).to(dtype.torch_dtype)


def tensor_to_bytes(value: torch.Tensor, dtype: Dtype) -> bytes:
    """Inverse of bytes_to_tensor: the bytes the .bin holds for `value` as `dtype`."""
    if dtype is Dtype.BFP16:
        bits = value.detach().to(torch.bfloat16).view(torch.int16).cpu().numpy()
        return bits.astype("<i2").tobytes()
    if dtype is Dtype.FP4_E2M1FN:  # values on the format's grid: their codes
        v = value.detach().cpu().to(torch.float32)
        codes = torch.searchsorted(torch.tensor(FP4_VALUES), v.abs().contiguous()) | (torch.signbit(v).long() << 3)
        return codes.to(torch.uint8).numpy().tobytes()
    if dtype.is_minifloat:  # values on the format's grid (quant/minifloat.py): their bytes
        return value.detach().cpu().to(torch.float32).to(_FP8_TORCH[dtype]).view(torch.uint8).numpy().tobytes()
    arr = value.detach().cpu()
    if arr.dtype == torch.bfloat16:  # NumPy has no bfloat16
        arr = arr.float()
    if dtype is Dtype.BOOL:
        arr = arr != 0
    elif dtype.is_integer and arr.dtype.is_floating_point:
        arr = torch.round(arr)
    return arr.numpy().astype(dtype.numpy_storage).tobytes()


def computing_float(x: torch.Tensor) -> torch.Tensor:
    """A float layer's values in the type it computes in: float32, or float64 where its
    graph computes float layers in float64 (node.float_layers_in_float64 hands them over
    as float64), so that no step rounds to float32 before its top does."""
    return x if x.dtype == torch.float64 else x.to(torch.float32)
