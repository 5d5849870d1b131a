"""How quantization is spelled in the IR: the one module that writes and reads the
fields of the tool chain's quantized format (docs/integer-semantics.md, "IR fields").

* `Rescale`: one multiplier/shift pair. Per tensor as params `<p>scale_value`,
  `<p>shift_value`, `<p>scale_type`, `<p>shift_type`; per channel as constants
  `<p>scale`, `<p>shift` (uint16 multipliers sharing one shift, as the NPU's
  per-channel rescale needs).
* `BranchRescales`: one multiplier per input branch and output (Eltwise
  ADD/SUB/MAX/MIN: `scale_value=[M_out, M_a, M_b]` with one shift; Concat: a
  multiplier and a shift per input), lists of types.
* `Lut`: a lookup table constant and its dtype.
* the quantization of a layer's tops (`layer_top_type/range/scale/zp`) and of its
  weights and biases (`weights_scale`, `weights_zp`, `biases_scale`,
  `biases_zp`: params per tensor, constants per channel).
"""
import contextlib
import contextvars
from dataclasses import dataclass
from typing import List, Optional, Union

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..tensor import PyTensor
from . import qmath
from .formats import blocks_per_channel

IntOrTensor = Union[int, torch.Tensor]
SHIFT_DTYPE = Dtype.INT8
QUANTIZED_CONSTANTS = ("weights", "biases")


def multiplier_dtype(mult_bits: int) -> Dtype:
    """The tool chain's multiplier register type: uint8 for multipliers of up to 8 bits, else uint16."""
    return Dtype.UINT8 if mult_bits <= 8 else Dtype.UINT16


def shift_dtype(shifts) -> Dtype:
    """int8 unless the shifts need more (as the tool chain types them)."""
    values = shifts.reshape(-1).tolist() if isinstance(shifts, torch.Tensor) else [shifts]
    lo, hi = min(values + [-1]), max(values)
    if -128 <= lo and hi <= 127:
        return Dtype.INT8
    return Dtype.INT16 if -32768 <= lo and hi <= 32767 else Dtype.INT32


def set_constant(node, name: str, value: torch.Tensor, dtype: Dtype) -> PyTensor:
    value = value.detach().reshape(value.shape).to(dtype.torch_dtype)
    t = PyTensor(name, value, dtype, tuple(value.shape))
    node.constants[name] = t
    return t


_POSITIVE_SHIFTS = contextvars.ContextVar("force_shift_positive", default=False)


@contextlib.contextmanager
def positive_shifts(on: bool):
    """Rescales made inside (Rescale.from_ratio) get no negative shift: a negative one
    becomes 0 with the largest multiplier, as the tool chain's force_shift_positive does.
    PyNode.quantize sets it from the layer's setting around its quantize function."""
    token = _POSITIVE_SHIFTS.set(bool(on))
    try:
        yield
    finally:
        _POSITIVE_SHIFTS.reset(token)


def _param_or_constant(node, param: str, constant: str):
    if constant in node.constants:
        return node.constants[constant].betensor.to(torch.int64)
    if param in node.params:
        return node.params[param]
    return None


@dataclass
class Rescale:
    """x -> round(x * multiplier * 2^-shift): ints, or int64 tensors per channel."""
    multiplier: IntOrTensor
    shift: IntOrTensor
    multiplier_type: Dtype = Dtype.UINT16
    shift_type: Dtype = SHIFT_DTYPE

    @property
    def per_channel(self) -> bool:
        return isinstance(self.multiplier, torch.Tensor) and self.multiplier.numel() > 1

    @classmethod
    def from_ratio(cls, ratio, mult_bits: int, force_shift_positive: Optional[bool] = None,
                   unify_shifts: bool = True) -> "Rescale":
        """The multiplier/shift of `ratio` (a number, or a tensor per channel), as the
        tool chain chooses them: at most `mult_bits` (<= 15) bits; per channel with
        one common shift and multipliers <= 32767 unless `unify_shifts` is off; no
        negative shift with `force_shift_positive` (None: the setting of the layer being
        quantized, `positive_shifts`)."""
        if force_shift_positive is None:
            force_shift_positive = _POSITIVE_SHIFTS.get()
        m, s = qmath.scale_approximation(ratio, mult_bits, force_shift_positive=force_shift_positive)
        if isinstance(m, torch.Tensor) and m.numel() > 1:
            if unify_shifts:
                m, s = qmath.unify_shifts(m, s)
                return cls(m, s, Dtype.UINT16, shift_dtype(s))
            return cls(m, s, multiplier_dtype(mult_bits), shift_dtype(s))
        if isinstance(m, torch.Tensor):
            m, s = int(m.reshape(-1)[0]), int(s.reshape(-1)[0])
        return cls(m, s, multiplier_dtype(mult_bits), shift_dtype(s))

    def write(self, node, prefix: str = "", suffix: str = "") -> None:
        """As `<prefix>scale<suffix>_value` etc. (LRN's second rescale is `scale_sum_value`)."""
        sc, sh = f"{prefix}scale{suffix}", f"{prefix}shift{suffix}"
        names = (sc, sh, f"{sc}_value", f"{sh}_value", f"{sc}_type", f"{sh}_type")
        for k in names:
            node.params.pop(k, None)
            node.constants.pop(k, None)
        if self.per_channel:
            set_constant(node, sc, self.multiplier, self.multiplier_type)
            set_constant(node, sh, torch.as_tensor(self.shift).expand_as(self.multiplier),
                         self.shift_type)
            return
        node.params[f"{sc}_value"] = int(self.multiplier)
        node.params[f"{sh}_value"] = int(self.shift)
        node.params[f"{sc}_type"] = self.multiplier_type.value
        node.params[f"{sh}_type"] = self.shift_type.value

    @classmethod
    def read(cls, node, prefix: str = "", required: bool = True, suffix: str = "") -> Optional["Rescale"]:
        """The rescale a quantized layer stores (constants win over params, as in the tool chain)."""
        m = _param_or_constant(node, f"{prefix}scale{suffix}_value", f"{prefix}scale{suffix}")
        s = _param_or_constant(node, f"{prefix}shift{suffix}_value", f"{prefix}shift{suffix}")
        if m is None or s is None:
            if not required:
                return None
            missing = f"{prefix}scale{suffix}_value" if m is None else f"{prefix}shift{suffix}_value"
            raise IRError(f"layer '{node.name}' ({node.type}): quantized, but '{missing}' "
                          f"(or the constant '{missing[:-6]}') is missing")
        return cls(_int_or_tensor(m, node, f"{prefix}scale{suffix}"), _int_or_tensor(s, node, f"{prefix}shift{suffix}"))

    def apply(self, x: torch.Tensor, zp, qmin, qmax) -> torch.Tensor:
        """qmath.requantize with this rescale (per channel: along the last axis)."""
        return qmath.requantize(x, self.multiplier, self.shift, zp, qmin, qmax)


@dataclass
class FloatScale:
    """The rescale of a layer computing in a scaled fp8 format (quant/minifloat.py): one float32
    factor, as param `scale_value` (with `scale_type = float32`) or per channel as the
    float32 constant `scale`; no shift."""
    scale: Union[float, torch.Tensor]

    def write(self, node) -> None:
        for k in ("scale", "shift", "scale_value", "shift_value", "scale_type", "shift_type"):
            node.params.pop(k, None)
            node.constants.pop(k, None)
        if isinstance(self.scale, torch.Tensor) and self.scale.numel() > 1:
            set_constant(node, "scale", self.scale.to(torch.float32), Dtype.FP32)
        else:
            node.params["scale_value"] = _float32(self.scale)
            node.params["scale_type"] = Dtype.FP32.value

    @classmethod
    def read(cls, node) -> "FloatScale":
        if "scale" in node.constants:
            return cls(node.constants["scale"].betensor.to(torch.float32))
        v = node.params.get("scale_value")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise IRError(f"layer '{node.name}' ({node.type}): an fp8 layer needs a number 'scale_value' (or the "
                          f"constant 'scale'), got {v!r}")
        return cls(_float32(v))


def _int_or_tensor(v, node, what):
    if isinstance(v, torch.Tensor):
        return v if v.numel() > 1 else int(v.reshape(-1)[0])
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
        raise IRError(f"layer '{node.name}' ({node.type}): {what} value '{v}' is not an integer")
    return int(v)


@dataclass
class BranchRescales:
    """One multiplier per branch (and for Eltwise one for the output first), shifts
    either one common value or one per branch."""
    multipliers: List[IntOrTensor]
    shifts: Union[IntOrTensor, List[IntOrTensor]]
    multiplier_type: Dtype = Dtype.UINT16
    shift_types: Union[Dtype, List[Dtype]] = SHIFT_DTYPE

    def write(self, node, prefix: str = "") -> None:
        """As `<prefix>scale_value`, `<prefix>shift_value` and their types (RegionFuse's
        `score_`/`box_` pairs), or the constants `<prefix>scale`/`<prefix>shift` per channel."""
        sc, sh = f"{prefix}scale", f"{prefix}shift"
        for k in (sc, sh, f"{sc}_value", f"{sh}_value", f"{sc}_type", f"{sh}_type"):
            node.params.pop(k, None)
            node.constants.pop(k, None)
        per_channel = any(isinstance(m, torch.Tensor) and m.numel() > 1 for m in self.multipliers)
        if per_channel:
            set_constant(node, sc, torch.stack([torch.as_tensor(m) for m in self.multipliers]),
                         self.multiplier_type)
            shifts = torch.stack([torch.as_tensor(s) for s in self.shifts]) if isinstance(self.shifts, list) \
                else torch.as_tensor(self.shifts)
            set_constant(node, sh, shifts, self.shift_types if isinstance(self.shift_types, Dtype)
                         else self.shift_types[0])
            return
        node.params[f"{sc}_value"] = [int(m) for m in self.multipliers]
        node.params[f"{sh}_value"] = [int(s) for s in self.shifts] if isinstance(self.shifts, list) \
            else int(self.shifts)
        node.params[f"{sc}_type"] = [self.multiplier_type.value] * len(self.multipliers)
        node.params[f"{sh}_type"] = [t.value for t in self.shift_types] if isinstance(self.shift_types, list) \
            else self.shift_types.value

    @classmethod
    def read(cls, node, count: int, prefix: str = "") -> Optional["BranchRescales"]:
        """The stored multipliers/shifts, or None when the layer stores none (its inputs
        already share the output's quantization)."""
        m = _param_or_constant(node, f"{prefix}scale_value", f"{prefix}scale")
        s = _param_or_constant(node, f"{prefix}shift_value", f"{prefix}shift")
        if m is None:
            return None
        ms = list(m) if isinstance(m, (list, torch.Tensor)) else [m]
        if len(ms) != count:
            raise IRError(f"layer '{node.name}' ({node.type}): {prefix}scale_value has {len(ms)} multipliers, "
                          f"expected {count}")
        shifts = 0 if s is None else (list(s) if isinstance(s, list) else s)
        return cls([_int_or_tensor(v, node, "scale") for v in ms],
                   [_int_or_tensor(v, node, "shift") for v in shifts] if isinstance(shifts, list)
                   else _int_or_tensor(shifts, node, "shift"))


def write_lut(node, table: torch.Tensor, dtype: Dtype, name: str = "lut") -> None:
    set_constant(node, name, table, dtype)


def read_lut(node, name: str = "lut"):
    """(table as int64, its dtype)."""
    c = node.get_constant(name)
    return c.betensor.to(torch.int64), c.dtype


# ---- tensors ----------------------------------------------------------------
def top_fields(node) -> dict:
    """layer_top_range/scale/zp of a layer whose tops are quantized ([] when none is)."""
    tops = node.outputs
    if not any(t.is_quantized or t.qinvariant for t in tops):
        return {}
    out = {"layer_top_range": [], "layer_top_scale": [], "layer_top_zp": []}
    for t in tops:
        if t.dtype.is_float:
            lo, hi = [float("-inf"), float("inf")]
        else:
            lo = t.qmin if t.qmin is not None else t.dtype.qmin
            hi = t.qmax if t.qmax is not None else t.dtype.qmax
        out["layer_top_range"].append([int(lo), int(hi)] if t.dtype.is_integer else [lo, hi])
        out["layer_top_scale"].append(_float32(t.scale))
        out["layer_top_zp"].append(int(t.zerop))
    return out


def _float32(v) -> float:
    """A scale as the float32 value the tool chain reads back."""
    return float(torch.tensor(float(v), dtype=torch.float32).item())


def read_top_fields(node, values: dict) -> None:
    """Tensor quantization from parsed layer_top_* lists (validated by the reader), and
    `ir_range`, what the in_ir strategy takes: the range, or the one a scale and zero
    point give on the 8-bit grid (a parser IR of a quantized model states those)."""
    ranges = values.get("layer_top_range") or [((zp - 128) / s, (zp + 127) / s) if s > 0 else None for s, zp in
                                               zip(values.get("layer_top_scale", []), values.get("layer_top_zp", []))]
    for t, r in zip(node.outputs, ranges):
        t.ir_range = (float(r[0]), float(r[1])) if r else None
    for i, t in enumerate(node.outputs):
        if "layer_top_scale" in values:
            t.scale = _float32(values["layer_top_scale"][i])
        if "layer_top_zp" in values:
            t.zerop = int(values["layer_top_zp"][i])
        if t.dtype.is_quantized and ("layer_top_scale" in values or "layer_top_range" in values):
            t.qbits = t.dtype.bits
            t.qmin, t.qmax = t.dtype.qmin, t.dtype.qmax
            if "layer_top_range" in values:  # a float range (a parser IR of a quantized model) is not a clamp
                lo, hi = values["layer_top_range"][i]
                if float(lo).is_integer() and float(hi).is_integer():
                    t.qmin, t.qmax = int(lo), int(hi)


def constant_quant_fields(node):
    """(params, constants) that state the weights'/biases' quantization:
    <c>_scale/<c>_zp as params when per tensor, float32/int32 constants per channel or
    per block ([channels * blocks], with the param weight_block_size); fp8 weights' zero
    points in their own type."""
    params, constants = {}, {}
    for key in QUANTIZED_CONSTANTS:
        c = node.constants.get(key)
        if c is None or not c.is_quantized:
            continue
        if isinstance(c.scale, torch.Tensor) and c.scale.numel() > 1:
            constants[f"{key}_scale"] = (c.scale.to(torch.float32), Dtype.FP32)
            zp = torch.as_tensor(c.zerop).reshape(-1)
            if c.dtype.is_minifloat:  # the tool chain's library wants fp8 weights' zero points in their type
                constants[f"{key}_zp"] = (zp.to(torch.float32), c.dtype)
            else:
                constants[f"{key}_zp"] = (zp.to(torch.int32) if key == "weights" else zp.to(torch.int64),
                                          Dtype.INT32 if key == "weights" else Dtype.INT64)
        else:
            params[f"{key}_scale"] = _float32(c.scale)
            params[f"{key}_zp"] = int(c.zerop)
        if c.block_size:
            params["weight_block_size"] = int(c.block_size)
    return params, constants


def read_constant_quant_fields(node) -> None:
    """Move <c>_scale/<c>_zp (params or constants) onto the weights/biases constants,
    where the integer forward reads them."""
    for key in QUANTIZED_CONSTANTS:
        c = node.constants.get(key)
        if c is None or not c.dtype.is_quantized:
            continue
        for suffix, attr in (("_scale", "scale"), ("_zp", "zerop")):
            name = key + suffix
            if name in node.constants:
                v = node.constants.pop(name).betensor
                v = v.to(torch.float32) if attr == "scale" else v.to(torch.int64)
                setattr(c, attr, v if v.numel() > 1 else (float(v.reshape(-1)[0]) if attr == "scale"
                                                           else int(v.reshape(-1)[0])))
            elif name in node.params:
                v = node.params.pop(name)
                setattr(c, attr, float(v) if attr == "scale" else int(v))
        c.qbits = c.dtype.bits
        c.qmin, c.qmax = c.dtype.qmin, c.dtype.qmax
        if isinstance(c.scale, torch.Tensor) or isinstance(c.zerop, torch.Tensor):
            c.key_axis = 0
            if key == "weights" and "weight_block_size" in node.params:
                c.block_size = _block_size(node, c)


def _block_size(node, c) -> int:
    """weight_block_size, checked against the weights and their scales."""
    block = node.params.pop("weight_block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise IRError(f"layer '{node.name}': weight_block_size must be an integer >= 1, got {block!r}")
    want = int(c.ir_shape[0]) * blocks_per_channel(c.ir_shape, block)
    for v in (c.scale, c.zerop):
        if isinstance(v, torch.Tensor) and v.numel() != want:
            raise IRError(f"layer '{node.name}': weights_scale/weights_zp hold {v.numel()} values; weights of "
                          f"shape {list(c.ir_shape)} in blocks of {block} need {want}")
    return block


@dataclass
class Shift:
    """A lone shift: params `<p>shift_value` and `<p>shift_type` (Resize's `interp_`,
    LayerNorm's `var_`)."""
    value: int
    type: Dtype = SHIFT_DTYPE

    def write(self, node, prefix: str) -> None:
        node.params[f"{prefix}shift_value"] = int(self.value)
        node.params[f"{prefix}shift_type"] = self.type.value

    @classmethod
    def read(cls, node, prefix: str) -> "Shift":
        key = f"{prefix}shift_value"
        value = _int_or_tensor(node.get_param(key), node, key)
        if isinstance(value, torch.Tensor):
            raise IRError(f"layer '{node.name}' ({node.type}): '{key}' must be one integer")
        return cls(value)


# ---- the ahead shift of wide accumulators -----------------------------------------
def write_remain_shift(node, bits: Optional[int]) -> None:
    """`remain_shift`: the bits of its rescale's shift a layer keeps after shifting its
    accumulator down to 32 bits (None: no ahead shift, the param removed)."""
    node.params.pop("remain_shift", None)
    if bits is not None:
        node.params["remain_shift"] = int(bits)


def remain_shift(node) -> Optional[int]:
    value = node.params.get("remain_shift")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IRError(f"layer '{node.name}' ({node.type}): remain_shift '{value}' is not a non-negative integer")
    return value
