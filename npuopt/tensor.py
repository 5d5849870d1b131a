"""PyTensor: a named tensor of the graph with its value and its quantization."""
import contextlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from .dtype import Dtype
from .quant.formats import block_values, by_channels
from .quant.qmath import dequantize
from .quant.statistics import Statistics
from .quant.strategies import activation_range_of


class TensorShape(tuple):
    """A shape, as the Compass Optimizer's plugins use it."""

    def clone(self) -> "TensorShape":
        return TensorShape(self)

    def dim(self) -> int:
        return len(self)

    def size(self) -> int:
        out = 1
        for d in self:
            out *= int(d)
        return out


def _as_value(value, dtype: Optional[Dtype]):
    """(torch tensor, dtype) from a torch tensor, a NumPy array, a TensorShape (zeros),
    a number or a list; dtype None takes the value's own."""
    if value is None:
        return torch.zeros(()), dtype or Dtype.FP32
    if isinstance(value, TensorShape):
        d = dtype or Dtype.FP32
        return torch.zeros(tuple(value), dtype=d.torch_dtype), d
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("="), copy=True))
    elif not isinstance(value, torch.Tensor):
        value = torch.tensor(value)
    if dtype is None:
        dtype = Dtype.BOOL if value.dtype == torch.bool else Dtype.of_torch(value.dtype)
    return value, dtype


@dataclass(eq=False)
class SourceGrid:
    """The grid a pre-quantized source model states for a tensor or a constant (its scale
    and zero point, in the IR's convention q = round(f * scale - zp), and its integer type),
    kept as decided data: the quantize functions take it where they would choose a grid
    (quant/tensors.py). `scale`/`zp` are numbers, or tensors per channel along axis 0;
    `integers` holds a constant's stored integers, exactly."""
    scale: object
    zp: object
    dtype: Dtype
    integers: Optional[torch.Tensor] = None


_OPT_FORM = [False]  # whether tensors show the Compass Optimizer's form now (see opt_form)


@contextlib.contextmanager
def opt_form(on: bool):
    """While on, scale, zerop, min and max read as 1-D tensors on the value's device,
    as the Compass Optimizer's PyTensor holds them (its op files index them, `zerop[0]`);
    one-element tensors written meanwhile are stored as numbers, npuopt's per-tensor form.
    PyNode turns it on around a user plugin's forward and quantize functions."""
    before, _OPT_FORM[0] = _OPT_FORM[0], bool(on)
    try:
        yield
    finally:
        _OPT_FORM[0] = before


def _shown(self, v, float_values: bool):
    if not _OPT_FORM[0] or v is None:
        return v
    t = torch.as_tensor(v, device=self.betensor.device)
    return (t.float() if float_values else t).reshape(-1)


def _stored(v, float_values: bool):
    if not (_OPT_FORM[0] and isinstance(v, torch.Tensor) and v.numel() == 1):
        return v
    v = v.item()
    return float(v) if float_values else (int(v) if float(v).is_integer() else v)


def _quant_field(key: str, float_values: bool):
    def get(self):
        return _shown(self, self.__dict__[key], float_values)

    def set(self, value):
        self.__dict__[key] = _stored(value, float_values)
    return property(get, set)


def get_tensor_default_property():
    """The PyTensor attributes that hold a tensor's quantization, calibrated range and
    origin: a plugin that backs them up (getattr) and restores them (setattr) undoes what
    a quantize function changed, as with the Compass Optimizer's list."""
    return ["_scale", "_zerop", "qbits", "qmin", "qmax", "qinvariant", "dtype", "block_size", "key_axis",
            "ir_shape", "ir_dtype", "ir_range", "pnode", "statistics", "_range"]


class PyTensor:
    """A tensor: an edge between layers, or a constant of one layer.

    `betensor` is the backend value (a torch.Tensor). The quantization fields
    follow the IR's convention q = round(f * scale - zerop): `scale` and `zerop`
    are numbers, or 1-D tensors along `key_axis` when per channel; `qmin`/`qmax`
    are the integer bounds the IR's layer_top_range states; `qinvariant` marks
    index-like integers that are never scaled.
    """

    def __init__(self, name: str, value=None, dtype: Optional[Dtype] = None,
                 ir_shape: Optional[Sequence[int]] = None):
        self.name = str(name)
        self.betensor, self.dtype = _as_value(value, dtype)
        self.ir_shape = TensorShape(ir_shape if ir_shape is not None else self.betensor.shape)
        # quantization
        self.scale = 1.0
        self.zerop = 0
        self.qbits: Optional[int] = None
        self.qmin: Optional[int] = None
        self.qmax: Optional[int] = None
        self.qinvariant = False
        self.key_axis: Optional[int] = None
        # calibration statistics, filled by the calibration step
        self.statistics = None
        # the Compass Optimizer's names: the producing layer (set when it runs or
        # quantizes), free-form attributes, and explicitly set calibrated ranges
        self.pnode = None
        self.attrs = {}
        self.ir_range = None
        self.ir_dtype = self.dtype  # the dtype the IR gave (the Compass Optimizer's layer_top_type)
        self.block_size = None      # per-block weights: values per block of each channel (key_axis 0)
        self._range = {}
        # the grid a pre-quantized source states for it (ir/compat.py): decided, never chosen
        self.source_grid: Optional[SourceGrid] = None

    scale = _quant_field("_scale", True)
    zerop = _quant_field("_zerop", False)
    shape = property(lambda self: self.betensor.shape)

    @property
    def is_quantized(self) -> bool:
        return self.dtype.is_quantized and self.qbits is not None

    @property
    def is_per_channel(self) -> bool:
        return isinstance(self.scale, torch.Tensor) and self.scale.numel() > 1

    def _broadcast(self, v):
        """v per channel (or block) shaped against the tensor, on the tensor's device."""
        if not isinstance(v, torch.Tensor) or v.numel() <= 1 or self.key_axis is None:
            return v
        v = v.to(self.betensor.device)
        if self.block_size and v.numel() > int(self.ir_shape[0]):
            return block_values(v, self.ir_shape, self.block_size)
        shape = [1] * len(self.ir_shape)
        shape[self.key_axis] = -1
        return v.reshape(shape)

    def dequantized(self, dtype=torch.float32) -> torch.Tensor:
        """A quantized tensor's real values (qmath.dequantize, in float32) as `dtype`; per
        block a few channels at a time, so that no scale per element is made for the whole."""
        def values(q, scale, zp):
            return dequantize(q, scale, zp).to(dtype)
        if self.block_size and self.key_axis is not None and isinstance(self.scale, torch.Tensor) \
                and self.scale.numel() > int(self.ir_shape[0]):
            device = self.betensor.device
            zerop = self.zerop.to(device) if isinstance(self.zerop, torch.Tensor) else self.zerop
            return by_channels(values, self.betensor, self.scale.to(device), zerop, self.block_size)
        return values(self.betensor, self.broadcast_scale, self.broadcast_zerop)

    @property
    def broadcast_scale(self):
        """scale shaped to broadcast against the tensor (per channel along key_axis; per
        block: one value per element)."""
        return self._broadcast(self.scale)

    @property
    def broadcast_zerop(self):
        return self._broadcast(self.zerop)

    # ---- the calibrated range, as the Compass Optimizer's plugins read it -------
    @property
    def planned_range(self) -> Optional[tuple]:
        """(min, max) as set on the tensor (by a global calibration method or a plugin,
        OPT's way of choosing an activation range), else None: quantization then takes
        this range instead of the one from the statistics."""
        if "min" not in self._range or "max" not in self._range:
            return None
        return (float(torch.as_tensor(self._range["min"]).min()), float(torch.as_tensor(self._range["max"]).max()))

    @planned_range.setter
    def planned_range(self, lo_hi: Optional[tuple]) -> None:
        kept = {k: v for k, v in self._range.items() if k not in ("min", "max")}
        self._range = kept if lo_hi is None else {**kept, "min": float(lo_hi[0]), "max": float(lo_hi[1])}

    @property
    def ranges_set(self) -> dict:
        """Every range set on the tensor (min/max, per channel), apart from its statistics:
        what a search takes and puts back."""
        return dict(self._range)

    @ranges_set.setter
    def ranges_set(self, ranges: dict) -> None:
        self._range = dict(ranges)

    def _calibrated(self, key: str):
        """min/max (per tensor) or min_key_axis/max_key_axis (along key_axis): what was
        set, else from the statistics with the producing layer's activation settings
        (its attrs['qsettings'], as the quantizer takes them: widened to include 0),
        else the extrema of the statistics or of the current value."""
        if key in self._range:
            return self._range[key]
        per_channel = key.endswith("_key_axis")
        if per_channel and self.key_axis is None:
            return None
        stats = self.statistics
        if stats is None or stats.empty or (per_channel and stats.axis != self.key_axis):
            stats = Statistics.of_constant(self.betensor.detach().float().cpu(), 2048,
                                           self.key_axis if per_channel else None)
        st = dict.get(self.pnode.attrs, "qsettings") if self.pnode is not None else None
        if st is not None and not per_channel and stats is self.statistics:
            lo, hi = activation_range_of(stats, st.calibration_strategy_for_activation, st.activation_bits,
                                         st.quantize_method_for_activation.symmetric)
        else:
            lo, hi = stats.min, stats.max
        return lo if key.startswith("min") else hi

    def _set_range(key):
        def setter(self, value):  # a new dict: a backup of _range (get_tensor_default_property) stays as it was
            self._range = {**self._range, key: value if key.endswith("_key_axis") else _stored(value, True)}
        return setter

    min = property(lambda self: _shown(self, self._calibrated("min"), True), _set_range("min"))
    max = property(lambda self: _shown(self, self._calibrated("max"), True), _set_range("max"))
    min_key_axis = property(lambda self: self._calibrated("min_key_axis"), _set_range("min_key_axis"))
    max_key_axis = property(lambda self: self._calibrated("max_key_axis"), _set_range("max_key_axis"))
    extrema_min = property(lambda self: self.statistics.min if self.statistics else self._calibrated("min"))
    extrema_max = property(lambda self: self.statistics.max if self.statistics else self._calibrated("max"))
    del _set_range

    # ---- the Compass Optimizer's quantization queries, on npuopt's fields ----------
    @property
    def device(self) -> torch.device:
        return self.betensor.device

    def is_perchannel_scales(self) -> bool:
        return isinstance(self.scale, torch.Tensor) and self.scale.numel() > 1

    def is_perchannel_zerops(self) -> bool:
        return isinstance(self.zerop, torch.Tensor) and self.zerop.numel() > 1

    def is_perchannel_quantization(self) -> bool:
        return self.key_axis is not None

    def key_axis_broadcast_shape(self):
        """The shape a per-channel scale takes to broadcast: -1 at key_axis, else 1."""
        if self.key_axis is None or not len(self.ir_shape):
            return [-1]
        shape = [1] * len(self.ir_shape)
        shape[self.key_axis] = -1
        return shape

    def is_qinvariant(self) -> bool:
        """qinvariant, and scale 1 and zero point 0 everywhere."""
        return bool(self.qinvariant and bool((torch.as_tensor(self.scale) == 1).all())
                    and bool((torch.as_tensor(self.zerop) == 0).all()))

    def set_qinvariant(self, qinvariant: bool = None) -> None:
        """Set qinvariant; with no argument, true where scale is 1 and zero point 0."""
        if qinvariant is not None:
            self.qinvariant = qinvariant
        elif bool((torch.as_tensor(self.scale) == 1).all()) and bool((torch.as_tensor(self.zerop) == 0).all()):
            self.qinvariant = True

    def clone_qinfo(self, other: "PyTensor") -> None:
        """Take other's quantization (scale, zero point, bits, range, dtype, qinvariant)."""
        for key in ("scale", "zerop", "qbits", "dtype", "qmin", "qmax", "qinvariant"):
            setattr(self, key, getattr(other, key))

    def is_qinfo_equal(self, other: "PyTensor") -> bool:
        for key in ("scale", "zerop", "qmin", "qmax", "dtype", "qinvariant", "qbits"):
            a, b = getattr(self, key), getattr(other, key)
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
                a, b = torch.as_tensor(a).reshape(-1), torch.as_tensor(b).reshape(-1)
                if a.shape != b.shape and a.numel() != 1 and b.numel() != 1 or not bool((a == b).all()):
                    return False
            elif a != b:
                return False
        return True

    def fit_dtype(self, dtype: Optional[Dtype] = None) -> None:
        """The value made representable in `dtype` (or its own): integers have NaN set
        to 0 and are clamped to the dtype's range, floats to its finite range (infinities
        kept); stored in the dtype's backend type, as npuopt's integer forwards hand on."""
        if dtype is not None:
            self.dtype = dtype
        v = self.betensor
        if self.dtype.is_integer:
            if v.is_floating_point():
                v = torch.nan_to_num(v.double(), nan=0.0)
            v = v.double().clamp(self.dtype.qmin, self.dtype.qmax) if v.is_floating_point() else \
                v.long().clamp(self.dtype.qmin, self.dtype.qmax)
        elif self.dtype.is_float and v.is_floating_point():
            info = torch.finfo(self.dtype.torch_dtype)
            v = torch.where(torch.isinf(v), v, v.clamp(info.min, info.max))
        self.betensor = v.to(self.dtype.torch_dtype)

    def clone(self, name: str = None) -> "PyTensor":
        import copy
        t = copy.copy(self)
        t.name = self.name if name is None else str(name)
        t.betensor = self.betensor.clone()
        t.attrs = dict(self.attrs)
        t._range = dict(self._range)
        return t

    def to_numpy(self) -> np.ndarray:
        v = self.betensor.detach().cpu()
        return (v.float() if v.dtype == torch.bfloat16 else v).numpy()

    def __repr__(self) -> str:
        return f"PyTensor({self.name!r}, {self.dtype.value}, ir_shape={list(self.ir_shape)})"
