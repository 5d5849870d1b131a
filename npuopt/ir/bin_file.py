"""The weights file (.bin) of an IR as the reader reads it."""
import math
import os

import numpy as np
import torch

from ..dtype import Dtype, bytes_to_tensor
from ..errors import IRError
from ..tensor import PyTensor


class WeightsFile:
    """The .bin, open once; each constant is read into memory of its own, which its
    tensor keeps: a mapping of the file would count its pages again while the
    constants are copied out of it. Constants at the same offset, size, type and shape
    (tied weights, as writer._Bin writes them) share one tensor: nothing changes a
    constant's tensor in place (a method that edits weights gives the layer a new one)."""

    def __init__(self, bin_path: str, txt_path: str):
        self.path = bin_path
        self.txt_path = txt_path
        self._file = None
        self.size = None
        self._read = {}  # (offset, size, dtype, shape) -> the tensor read there
        if os.path.isfile(bin_path):
            self.size = os.path.getsize(bin_path)
            if self.size:
                try:
                    self._file = open(bin_path, "rb")
                except OSError as e:
                    raise IRError(f"cannot read weights file '{bin_path}': {e.strerror or e}") from None

    def tensor(self, offset: int, size: int, dtype: Dtype, shape: tuple) -> torch.Tensor:
        """The constant of `dtype` and `shape` at `offset` (checked to lie in the file)."""
        if (offset, size, dtype, shape) not in self._read:
            self._read[offset, size, dtype, shape] = bytes_to_tensor(self._bytes(offset, size), dtype, shape)
        return self._read[offset, size, dtype, shape]

    def _bytes(self, offset: int, size: int) -> np.ndarray:
        if not size:
            return np.zeros(0, np.uint8)
        try:
            self._file.seek(offset)
            raw = np.fromfile(self._file, np.uint8, size)
        except OSError as e:
            raise IRError(f"cannot read weights file '{self.path}': {e.strerror or e}") from None
        if raw.size != size:  # the file shrank since its size was taken
            raise IRError(f"weights file '{self.path}' ends at {offset + raw.size} bytes, before the constants "
                          f"of '{self.txt_path}' do")
        return raw

    def check_finite(self, c: PyTensor, layer: str) -> None:
        """No NaN or Inf in a float constant: one line naming the .bin, the layer, the constant."""
        if not c.dtype.is_float or not c.betensor.numel():
            return
        lo, hi = torch.aminmax(c.betensor.reshape(-1))  # NaN and Inf show there, without a mask of the weights' size
        if math.isfinite(float(lo)) and math.isfinite(float(hi)):
            return
        bad = ~torch.isfinite(c.betensor.reshape(-1))
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise IRError(f"weights file '{self.path}': layer '{layer}': constant '{c.name}' holds "
                          f"{float(c.betensor.reshape(-1)[i])} at element {i} (NaN/Inf: {int(bad.sum())} of "
                          f"{bad.numel()} values)")

    def close(self):
        if self._file is not None:
            self._file.close()
