"""Calibration statistics of one tensor, gathered batch by batch.

Non-finite values (NaN, +Inf) are left out of every statistic; the caller is
told (`nonfinite` counts them) so it can warn, naming the tensor. An attention
mask's "minus infinity" (-Inf, float32's lowest, -1e9: any value at or below
MASKED) is left out too, silently, and counted (`masked`): scores plus a mask keep
the scores' range, the masked values saturate at the bottom of the grid when
quantized, and a mask itself gets a range that reaches below the scores'
(calibration.plan_mask_ranges; docs/calibration.md, "Attention masks").
"""
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from ..errors import ConfigError
from . import qmath

SUM_SLICE = 1 << 20  # values summed per float64 slice (8 MiB of scratch)
MASKED = -1e8  # values at or below it are an attention mask's "minus infinity"
_STEPS_MAX = float(np.finfo(np.float32).max) / 2  # histogram steps (x - lo) * bins stay below it in float32


def usable(x: torch.Tensor) -> torch.Tensor:
    """Where a float tensor's values count in statistics and ranges: finite and above MASKED."""
    return torch.isfinite(x) & (x > MASKED)


def _widened(cur_lo: float, cur_hi: float, lo: float, hi: float) -> Tuple[float, float]:
    """The histogram's range [cur_lo, cur_hi] widened to cover [lo, hi]; its width at
    least doubles, so that widening is rare."""
    width = cur_hi - cur_lo
    new_width = max(hi - lo, 2 * width)
    if lo < cur_lo and hi > cur_hi:
        new_lo = lo - (new_width - (hi - lo)) / 2
    elif lo < cur_lo:
        new_lo = cur_hi - new_width if hi <= cur_hi else lo
    else:
        new_lo = cur_lo
    new_lo = min(new_lo, lo)
    return new_lo, max(new_lo + new_width, hi)


@dataclass
class BatchPart:
    """What one batch adds to a tensor's statistics (`Statistics.fold`)."""
    nonfinite: int
    masked: int
    lo: object = None          # extrema of its finite values (floats, or tensors per channel); None: none
    hi: object = None
    count: int = 0             # finite values, their sums in float64 per slice of SUM_SLICE, their histogram
    sums: List[float] = field(default_factory=list)
    squares: List[float] = field(default_factory=list)
    hist: Optional[torch.Tensor] = None
    hist_range: Optional[Tuple[float, float]] = None


@dataclass
class FiniteValues:
    """A batch's usable values (1-D float32; NaN/+Inf left out and counted, masked values
    left out), their extrema `lo`/`hi` (None when there is none), and per channel along
    `axis` when it is set."""
    flat: torch.Tensor
    lo: Optional[float]
    hi: Optional[float]
    nonfinite: int = 0
    masked: int = 0
    channel_lo: Optional[torch.Tensor] = None
    channel_hi: Optional[torch.Tensor] = None

    @classmethod
    def of(cls, x: torch.Tensor, axis: Optional[int] = None) -> "FiniteValues":
        x = x.detach()
        if not x.is_floating_point():
            x = x.to(torch.float32)
        if x.numel():
            # the usual case, in fewer passes and without masks of x's size: one aminmax
            # gives the extrema and says whether every value is usable (NaN propagates
            # into it, an Inf is an extremum)
            lo, hi = (float(v) for v in torch.aminmax(x))
            if MASKED < lo and math.isfinite(hi):
                values = cls(x.reshape(-1).to(torch.float32), lo, hi)
                if axis is not None:
                    values.channel_lo, values.channel_hi = _channel_extrema(x, None, True, axis)
                return values
        finite = usable(x)
        all_finite = bool(finite.all())
        flat = (x.reshape(-1) if all_finite else x[finite]).to(torch.float32)
        found = flat.numel() > 0
        masked = 0 if all_finite else int((x <= MASKED).sum())
        values = cls(flat, float(flat.min()) if found else None, float(flat.max()) if found else None,
                     0 if all_finite else int((~finite).sum()) - masked, masked)
        if axis is not None:
            values.channel_lo, values.channel_hi = _channel_extrema(x, finite, all_finite, axis)
        return values

    def part(self, bins: int, hist_range: Optional[Tuple[float, float]]) -> BatchPart:
        """The batch's contribution, its histogram over `hist_range` (Statistics.hist_range_after)."""
        per_channel = self.channel_lo is not None
        part = BatchPart(self.nonfinite, self.masked, self.channel_lo if per_channel else self.lo,
                         self.channel_hi if per_channel else self.hi)
        if self.lo is None:
            return part
        flat = self.flat
        part.count = flat.numel()
        for start in range(0, flat.numel(), SUM_SLICE):  # float64 sums in reused buffers: memory stays small
            piece = flat[start:start + SUM_SLICE]
            d = qmath.scratch(piece.shape, torch.float64, flat.device, "statistics").copy_(piece)
            part.sums.append(float(d.sum()))
            part.squares.append(float(torch.mul(d, d, out=d).sum()))
        part.hist = histogram(flat, bins, *hist_range, self.lo, self.hi)
        part.hist_range = hist_range
        return part


def histogram(flat: torch.Tensor, bins: int, lo: float, hi: float, low: float, high: float) -> torch.Tensor:
    """torch.histc(flat, bins, lo, hi) as float64 on the CPU, for finite float32 values
    `flat` whose extrema `low`/`high` lie in the range. histc (the Compass Optimizer's
    too) puts x in bin int((x - lo) * bins / (hi - lo)), each step in float32 with lo,
    hi rounded to float32, and x = hi in the last bin; on the CPU the same float32
    steps and a bincount, slice by slice in reused buffers, count the same about five
    times faster (tests/test_calibration.py checks it against histc, values on the bin
    edges too). Where those conditions do not hold, histc itself; so too where
    (x - lo) * bins can overflow float32 (a range near float32's largest, as an
    attention mask of float32's lowest value gives: histc's own steps overflow there)."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    steps_fit = 0 < (float(hi32) - float(lo32)) * bins < _STEPS_MAX
    if flat.device.type != "cpu" or flat.dtype != torch.float32 or not (lo32 <= low and high <= hi32) \
            or not steps_fit or bins >= 1 << 30:
        return torch.histc(flat, bins, lo, hi).to(torch.float64).cpu()
    width = np.float32(hi32 - lo32)
    counts = torch.zeros(bins, dtype=torch.int64)
    for start in range(0, flat.numel(), SUM_SLICE):
        piece = flat[start:start + SUM_SLICE]
        steps = torch.sub(piece, float(lo32), out=qmath.scratch(piece.shape, torch.float32, flat.device, "bins"))
        steps.mul_(float(bins)).div_(float(width))  # >= 0, and at most bins: x <= hi
        index = qmath.scratch(piece.shape, torch.int32, flat.device, "bin index").copy_(steps)
        counts += torch.bincount(index.clamp_(max=bins - 1), minlength=bins)
    return counts.to(torch.float64)


def _channel_extrema(x: torch.Tensor, finite: torch.Tensor, all_finite: bool, axis: int):
    """Per-channel extrema along `axis` (float64, on the CPU); 0 for a channel with no finite value."""
    axis = axis % x.dim()
    xc = x.movedim(axis, 0).reshape(x.shape[axis], -1).to(torch.float32)
    if all_finite:
        return xc.amin(dim=1).double().cpu(), xc.amax(dim=1).double().cpu()
    fc = finite.movedim(axis, 0).reshape(x.shape[axis], -1)
    lo = torch.where(fc, xc, torch.full_like(xc, float("inf"))).amin(dim=1)
    hi = torch.where(fc, xc, torch.full_like(xc, float("-inf"))).amax(dim=1)
    lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
    hi = torch.where(torch.isfinite(hi), hi, torch.zeros_like(hi))
    return lo.double().cpu(), hi.double().cpu()


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
        self.masked = 0                        # values of an attention mask's "minus infinity" (MASKED)

    # ---- gathering ---------------------------------------------------------
    def update(self, x: torch.Tensor) -> None:
        values = FiniteValues.of(x, self.axis)
        self.fold(values.part(self.bins, self.hist_range_after(values.lo, values.hi)))

    def hist_range_after(self, lo: Optional[float], hi: Optional[float], current=None) -> Optional[Tuple[float, float]]:
        """The histogram's range once a batch whose finite values span [lo, hi] (None: it
        has none) is folded in, from the range `current` (default: the present one)."""
        if current is None and self.hist is not None:
            current = (self.hist_lo, self.hist_hi)
        if lo is None:
            return current
        if current is None:
            return (lo, lo + max(abs(lo), 1.0) * 1e-6) if hi <= lo else (lo, hi)
        if lo < current[0] or hi > current[1]:
            return _widened(*current, min(lo, current[0]), max(hi, current[1]))
        return current

    def fold(self, part: "BatchPart") -> None:
        """Add what one batch contributes; batches are folded in the order they came (the
        running means of extrema, the float sums and the histogram's widening depend on it)."""
        self.nonfinite += part.nonfinite
        self.masked += part.masked
        if part.lo is not None:
            self._merge_extrema(part.lo, part.hi)
        if not part.count:
            return
        self.count += part.count
        for total, square in zip(part.sums, part.squares):
            self.sum += total
            self.sum_sq += square
        lo, hi = part.hist_range
        if self.hist is None:
            self.hist, self.hist_lo, self.hist_hi = torch.zeros(self.bins, dtype=torch.float64), lo, hi
        elif (lo, hi) != (self.hist_lo, self.hist_hi):
            self._rebin(lo, hi)
        self.hist += part.hist

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

    def _rebin(self, new_lo: float, new_hi: float) -> None:
        """Each old bin's count goes to the new bin (of [new_lo, new_hi]) holding its centre."""
        width = self.hist_hi - self.hist_lo
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

    @property
    def mask_only(self) -> bool:
        """An attention mask: masked values and at most one other value (its 0)."""
        if not self.masked or self.empty:
            return bool(self.masked)
        return float(torch.as_tensor(self.min).min()) == float(torch.as_tensor(self.max).max())

    # ---- persistence ---------------------------------------------------------
    _FIELDS = ("bins", "momentum", "axis", "min", "max", "running_min", "running_max", "count", "sum",
               "sum_sq", "hist", "hist_lo", "hist_hi", "nonfinite", "masked")

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._FIELDS}

    @classmethod
    def from_state(cls, state: dict) -> "Statistics":
        s = cls(state["bins"], state["momentum"], state["axis"])
        for k in cls._FIELDS:  # a field newer than the file ("masked") keeps its default
            setattr(s, k, state[k] if k in state else getattr(s, k))
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
