"""Calibration statistics of one tensor, gathered batch by batch.

Non-finite values (NaN, +-Inf) are left out of every statistic; the caller is
told (`nonfinite` counts them) so it can warn, naming the tensor.
"""
import math
import os
from typing import Dict, Optional, Tuple

import torch

from ..errors import ConfigError
from . import qmath

SUM_SLICE = 1 << 20  # values summed per float64 slice (8 MiB of scratch)


class Statistics:
    """Extrema, running means of batch extrema, moments and a histogram.

    With `axis` set, min/max and their running means are per channel along that
    axis (1-D tensors); the histogram and moments are always per tensor.
    The histogram covers [hist_lo, hist_hi] and is re-binned to a wider range when
    a batch falls outside it (the range at least doubles, so re-binning is rare).
    """

    def __init__(self, bins: int = 2048, momentum: float = 0.9, axis: Optional[int] = None):
        self.bins = int(bins)
        self.momentum = float(momentum)
        self.axis = axis
        self.min = self.max = None            # extrema (floats, or tensors per channel)
        self.running_min = self.running_max = None
        self.count = 0
        self.sum = 0.0
        self.sum_sq = 0.0
        self.hist = None                       # float64 tensor [bins]
        self.hist_lo = self.hist_hi = 0.0
        self.nonfinite = 0

    # ---- gathering ---------------------------------------------------------
    def update(self, x: torch.Tensor) -> None:
        x = x.detach()
        if not x.is_floating_point():
            x = x.to(torch.float32)
        if self.axis is None and x.numel():
            # the usual case, in fewer passes: one aminmax gives the extrema and says
            # whether every value is finite (NaN propagates into it, an Inf is an extremum)
            lo, hi = (float(v) for v in torch.aminmax(x))
            if math.isfinite(lo) and math.isfinite(hi):
                self._merge_extrema(lo, hi)
                self._add_finite(x.reshape(-1).to(torch.float32), lo, hi)
                return
        finite = torch.isfinite(x)
        all_finite = bool(finite.all())
        if not all_finite:
            self.nonfinite += int((~finite).sum())
        if self.axis is not None:
            self._update_per_channel(x, finite, all_finite)
            flat = x[finite] if not all_finite else x.reshape(-1)
        else:
            flat = x.reshape(-1) if all_finite else x[finite]
            if flat.numel():
                self._merge_extrema(float(flat.min()), float(flat.max()))
        if flat.numel() == 0:
            return
        flat = flat.to(torch.float32)
        self._add_finite(flat, float(flat.min()), float(flat.max()))

    def _add_finite(self, flat: torch.Tensor, lo: float, hi: float) -> None:
        """Moments and histogram of finite float32 values `flat` (1-D), lo/hi their extrema.
        The sums are taken in float64 over slices of SUM_SLICE values in reused buffers:
        memory stays small whatever the activation and the batch."""
        self.count += flat.numel()
        for start in range(0, flat.numel(), SUM_SLICE):
            part = flat[start:start + SUM_SLICE]
            d = qmath.scratch(part.shape, torch.float64, flat.device, "statistics").copy_(part)
            self.sum += float(d.sum())
            self.sum_sq += float(torch.mul(d, d, out=d).sum())
        self._update_hist(flat, lo, hi)

    def _merge_extrema(self, lo, hi) -> None:
        if self.min is None:
            self.min, self.max = lo, hi
            self.running_min, self.running_max = lo, hi
            return
        m = self.momentum
        if isinstance(lo, torch.Tensor):
            self.min, self.max = torch.minimum(self.min, lo), torch.maximum(self.max, hi)
        else:
            self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.running_min = self.running_min * m + lo * (1 - m)
        self.running_max = self.running_max * m + hi * (1 - m)

    def _update_per_channel(self, x, finite, all_finite) -> None:
        axis = self.axis % x.dim()
        xc = x.movedim(axis, 0).reshape(x.shape[axis], -1).to(torch.float32)
        if not all_finite:
            fc = finite.movedim(axis, 0).reshape(x.shape[axis], -1)
            lo = torch.where(fc, xc, torch.full_like(xc, float("inf"))).amin(dim=1)
            hi = torch.where(fc, xc, torch.full_like(xc, float("-inf"))).amax(dim=1)
            lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
            hi = torch.where(torch.isfinite(hi), hi, torch.zeros_like(hi))
        else:
            lo, hi = xc.amin(dim=1), xc.amax(dim=1)
        self._merge_extrema(lo.double().cpu(), hi.double().cpu())

    def _update_hist(self, flat: torch.Tensor, lo: float, hi: float) -> None:
        if self.hist is None:
            if hi <= lo:
                hi = lo + max(abs(lo), 1.0) * 1e-6
            self.hist_lo, self.hist_hi = lo, hi
            self.hist = torch.zeros(self.bins, dtype=torch.float64)
        elif lo < self.hist_lo or hi > self.hist_hi:
            self._rebin(min(lo, self.hist_lo), max(hi, self.hist_hi))
        h = torch.histc(flat, self.bins, self.hist_lo, self.hist_hi)
        self.hist += h.to(torch.float64).cpu()

    def _rebin(self, lo: float, hi: float) -> None:
        """Widen to cover [lo, hi]; the width at least doubles. Each old bin's
        count goes to the new bin holding its centre."""
        width = self.hist_hi - self.hist_lo
        new_width = max(hi - lo, 2 * width)
        if lo < self.hist_lo and hi > self.hist_hi:
            new_lo = lo - (new_width - (hi - lo)) / 2
        elif lo < self.hist_lo:
            new_lo = self.hist_hi - new_width if hi <= self.hist_hi else lo
        else:
            new_lo = self.hist_lo
        new_lo = min(new_lo, lo)
        new_hi = max(new_lo + new_width, hi)
        centres = self.hist_lo + (torch.arange(self.bins, dtype=torch.float64) + 0.5) * width / self.bins
        idx = ((centres - new_lo) / (new_hi - new_lo) * self.bins).floor().clamp(0, self.bins - 1).long()
        new = torch.zeros(self.bins, dtype=torch.float64)
        new.index_add_(0, idx, self.hist)
        self.hist, self.hist_lo, self.hist_hi = new, new_lo, new_hi

    # ---- derived -----------------------------------------------------------
    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        if not self.count:
            return 0.0
        return max(self.sum_sq / self.count - self.mean ** 2, 0.0) ** 0.5

    def bin_centres(self) -> torch.Tensor:
        w = (self.hist_hi - self.hist_lo) / self.bins
        return self.hist_lo + (torch.arange(self.bins, dtype=torch.float64) + 0.5) * w

    @property
    def empty(self) -> bool:
        return self.min is None

    # ---- persistence ---------------------------------------------------------
    _FIELDS = ("bins", "momentum", "axis", "min", "max", "running_min", "running_max", "count", "sum",
               "sum_sq", "hist", "hist_lo", "hist_hi", "nonfinite")

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._FIELDS}

    @classmethod
    def from_state(cls, state: dict) -> "Statistics":
        s = cls(state["bins"], state["momentum"], state["axis"])
        for k in cls._FIELDS:
            setattr(s, k, state[k])
        return s

    @classmethod
    def of_constant(cls, value: torch.Tensor, bins: int, axis: Optional[int] = None) -> "Statistics":
        s = cls(bins, 0.0, axis)
        s.update(value.detach().to("cpu", torch.float32))
        return s


def save_statistics(path: str, stats: Dict[str, Statistics], meta: dict) -> None:
    """torch.save of plain dicts keyed by tensor name; written to a temp name, then renamed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"format": "npuopt-statistics-1", "meta": meta,
                "tensors": {name: s.state_dict() for name, s in stats.items()}}, tmp)
    os.replace(tmp, path)


def load_statistics(path: str) -> Dict[str, Statistics]:
    return load_statistics_file(path)[0]


def load_statistics_file(path: str) -> Tuple[Dict[str, Statistics], dict]:
    """(the statistics, the meta saved with them)."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ConfigError(f"statistic_file '{path}' cannot be read: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != "npuopt-statistics-1":
        raise ConfigError(f"statistic_file '{path}' is not an npuopt statistics file")
    return {name: Statistics.from_state(st) for name, st in data["tensors"].items()}, dict(data.get("meta") or {})
