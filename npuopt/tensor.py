"""PyTensor: a named tensor of the graph with its value and its quantization."""
from typing import Optional, Sequence

import torch

from .dtype import Dtype


class PyTensor:
    """A tensor: an edge between layers, or a constant of one layer.

    `betensor` is the backend value (a torch.Tensor). The quantization fields
    follow the IR's convention q = round(f * scale - zerop): `scale` and `zerop`
    are numbers, or 1-D tensors along `key_axis` when per channel; `qmin`/`qmax`
    are the integer bounds the IR's layer_top_range states; `qinvariant` marks
    index-like integers that are never scaled.
    """

    def __init__(self, name: str, value: Optional[torch.Tensor] = None,
                 dtype: Dtype = Dtype.FP32, ir_shape: Optional[Sequence[int]] = None):
        self.name = name
        self.betensor = value if value is not None else torch.zeros(())
        self.dtype = dtype
        self.ir_shape = tuple(ir_shape) if ir_shape is not None else tuple(self.betensor.shape)
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

    def __repr__(self) -> str:
        return f"PyTensor({self.name!r}, {self.dtype.value}, ir_shape={list(self.ir_shape)})"
