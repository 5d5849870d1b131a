"""PyTensor: a named tensor of the graph with its value and its quantization."""
from typing import Optional, Sequence

import numpy as np
import torch

from .dtype import Dtype


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
        from .utils.dtype_utils import torch_type2dtype
        dtype = Dtype.BOOL if value.dtype == torch.bool else torch_type2dtype(value.dtype)
    return value, dtype


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
        self._range = {}

    @property
    def is_quantized(self) -> bool:
        return self.dtype.is_integer and self.qbits is not None

    @property
    def is_per_channel(self) -> bool:
        return isinstance(self.scale, torch.Tensor) and self.scale.numel() > 1

    def _broadcast(self, v):
        if not isinstance(v, torch.Tensor) or v.numel() <= 1 or self.key_axis is None:
            return v
        shape = [1] * len(self.ir_shape)
        shape[self.key_axis] = -1
        return v.reshape(shape)

    @property
    def broadcast_scale(self):
        """scale shaped to broadcast against the tensor (per channel along key_axis)."""
        return self._broadcast(self.scale)

    @property
    def broadcast_zerop(self):
        return self._broadcast(self.zerop)

    # ---- the calibrated range, as the Compass Optimizer's plugins read it -------
    def _calibrated(self, key: str):
        """min/max (per tensor) or min_key_axis/max_key_axis (along key_axis): what was
        set, else from the statistics with the producing layer's activation strategy
        (widened to include 0), else the extrema of the current value."""
        if key in self._range:
            return self._range[key]
        per_channel = key.endswith("_key_axis")
        if per_channel and self.key_axis is None:
            return None
        from .quant.statistics import Statistics
        stats = self.statistics
        if stats is None or stats.empty or (per_channel and stats.axis != self.key_axis):
            stats = Statistics.of_constant(self.betensor.detach().float().cpu(), 2048,
                                           self.key_axis if per_channel else None)
        if self.pnode is not None and not per_channel and stats is self.statistics:
            from .quant.tensors import calibrated_range
            lo, hi = calibrated_range(self.pnode, self, symmetric=False)
        else:
            lo, hi = stats.min, stats.max
        return lo if key.startswith("min") else hi

    def _set_range(key):
        def setter(self, value):
            self._range[key] = value
        return setter

    min = property(lambda self: self._calibrated("min"), _set_range("min"))
    max = property(lambda self: self._calibrated("max"), _set_range("max"))
    min_key_axis = property(lambda self: self._calibrated("min_key_axis"), _set_range("min_key_axis"))
    max_key_axis = property(lambda self: self._calibrated("max_key_axis"), _set_range("max_key_axis"))
    extrema_min = property(lambda self: self.statistics.min if self.statistics else self._calibrated("min"))
    extrema_max = property(lambda self: self.statistics.max if self.statistics else self._calibrated("max"))
    del _set_range

    @property
    def ir_dtype(self) -> Dtype:
        return self.dtype

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
