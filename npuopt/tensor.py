"""PyTensor: a named tensor of the graph with its value and its quantization."""
from typing import Optional, Sequence

import torch

from .dtype import Dtype


class PyTensor:
    """A tensor: an edge between layers, or a constant of one layer.

    `betensor` is the backend value (a torch.Tensor). The quantization fields
    follow the IR's convention q = round(f * scale - zerop).
    """

    def __init__(self, name: str, value: Optional[torch.Tensor] = None,
                 dtype: Dtype = Dtype.FP32, ir_shape: Optional[Sequence[int]] = None):
        self.name = name
        self.betensor = value if value is not None else torch.zeros(())
        self.dtype = dtype
        self.ir_shape = tuple(ir_shape) if ir_shape is not None else tuple(self.betensor.shape)
        # quantization
        self.scale = 1.0           # float, or a 1-D tensor when per channel
        self.zerop = 0             # int, or a 1-D tensor when per channel
        self.qbits: Optional[int] = None
        self.qmin: Optional[int] = None
        self.qmax: Optional[int] = None
        self.qinvariant = False    # index-like values that are never scaled
        self.per_channel_axis: Optional[int] = None
        # calibration statistics, filled by the calibration step
        self.statistics = None
        # the quantized IR's layer_top_range, when known
        self.ir_range = None

    @property
    def is_quantized(self) -> bool:
        return self.dtype.is_integer and self.qbits is not None

    def clone_meta(self, name: str) -> "PyTensor":
        t = PyTensor(name, self.betensor, self.dtype, self.ir_shape)
        for key in ("scale", "zerop", "qbits", "qmin", "qmax", "qinvariant", "per_channel_axis"):
            setattr(t, key, getattr(self, key))
        return t

    def __repr__(self) -> str:
        return f"PyTensor({self.name!r}, {self.dtype.value}, ir_shape={list(self.ir_shape)})"
