"""Calibration strategies: statistics of a tensor -> the float range (lo, hi) to quantize.

Every strategy returns a range inside the observed extrema; the quantizer then
widens it to include 0. Per-channel statistics give per-channel extrema and
running means; histogram-based strategies (percentile, kld, mse, aciq) are per
tensor and, on per-channel statistics, clip each channel's extrema to the
per-tensor answer.
"""
import functools
import math
import re
from typing import Tuple

import numpy as np
import torch

from ..errors import ConfigError
from .formats import SettingValue
from .statistics import Statistics

NAMED = ("extrema", "mean", "kld", "mse", "aciq_laplace", "aciq_gauss", "in_ir")
KNOWN = ", ".join(NAMED) + (", <P>percentile (e.g. 99.99percentile), <N>std (e.g. 3std), <N>kld (e.g. 10kld), "
                            "<R>aciq_laplace, <R>aciq_gauss (e.g. 1.5aciq_gauss), weighted_scale_param[a,b,c,d]")
_NUMBERED = {"percentile": re.compile(r"(\d+(?:\.\d+)?)percentile"), "std": re.compile(r"(\d+(?:\.\d+)?)std"),
             "kld": re.compile(r"(\d+)kld"), "aciq_laplace": re.compile(r"(\d+(?:\.\d*)?)aciq_laplace"),
             "aciq_gauss": re.compile(r"(\d+(?:\.\d*)?)aciq_gauss")}


_WEIGHTED = re.compile(r"weighted_scale_param\[([-+\d.]+),([-+\d.]+),([-+\d.]+),([-+\d.]+),?\]")


class Strategy(SettingValue):
    """A calibration strategy, taken apart once where the cfg or an opt_config names it:
    `kind` (one of NAMED, 'percentile', 'std', ..., 'weighted_scale_param') and its
    number (the percentile, the count of standard deviations; None for the named ones) or
    its params (weighted_scale_param's four). It is its text, too."""
    kind: str
    number: float
    params: tuple

    def __new__(cls, text: str, kind: str, number: float = None, params: tuple = ()):
        self = super().__new__(cls, text)
        self.kind, self.number, self.params = kind, number, tuple(params)
        return self

    def __getnewargs__(self):
        return str(self), self.kind, self.number, self.params


def check_strategy(name, where: str = "") -> Strategy:
    """`name` as a Strategy (a Strategy is returned as it is: parsed once); an unknown
    one is a ConfigError starting with `where`."""
    if isinstance(name, Strategy):
        return name
    s = str(name).strip().lower()
    if s in NAMED:
        return Strategy(s, s)
    m = _WEIGHTED.fullmatch(re.sub(r"\s+", "", s))
    if m:
        return Strategy(s, "weighted_scale_param", None, tuple(float(v) for v in m.groups()))
    for kind, pattern in _NUMBERED.items():
        m = pattern.fullmatch(s)
        if m:
            if kind == "percentile" and not 0 < float(m.group(1)) <= 100:
                raise ConfigError(f"{where}calibration strategy '{name}': the percentile must be in (0, 100]")
            if kind != "percentile" and float(m.group(1)) <= 0:
                raise ConfigError(f"{where}calibration strategy '{name}': the number must be positive")
            return Strategy(s, kind, float(m.group(1)))
    raise ConfigError(f"{where}unknown calibration strategy '{name}' (known: {KNOWN})")


def calibrate_range(stats: Statistics, strategy, bits: int = 8, symmetric: bool = False):
    """(lo, hi) for `stats` under `strategy` (a Strategy, or its text): floats, or 1-D
    tensors for per-channel stats."""
    s = check_strategy(strategy)
    if stats.empty:
        return 0.0, 0.0
    if s.kind in ("extrema", "in_ir"):  # in_ir: the IR's range where it states one (tensors.activation_range)
        return stats.min, stats.max
    if s.kind == "mean":
        return stats.running_min, stats.running_max
    if s.kind == "std":
        lo, hi = stats.mean - s.number * stats.std, stats.mean + s.number * stats.std
    elif s.kind == "percentile":
        lo, hi = percentile_range(stats, s.number)
    elif s.kind == "kld":
        lo, hi = kld_range(stats, bits, int(s.number or 1))
    elif s.kind == "mse":
        lo, hi = mse_range(stats, bits, symmetric)
    elif s.kind == "weighted_scale_param":
        return weighted_scale_range(stats, bits, s.params)
    elif s.kind == "aciq_gauss":
        lo, hi = aciq_range(stats, gauss_alpha(bits) * stats.std * (s.number or 1.0))
    else:
        lo, hi = aciq_range(stats, laplace_alpha(bits) * _mean_abs_deviation(stats) * (s.number or 1.0))
    return _clip_to_extrema(stats, lo, hi)


RANGE_SIGNIFICANT_BITS = 8


def outward_to_grid(lo: float, hi: float, bits: int = RANGE_SIGNIFICANT_BITS):
    """[lo, hi] widened to the nearest values of `bits` significant bits (at most 2^-(bits-1)
    wider). Float sums over calibration data differ in their last bits with the thread
    count and the machine; on this grid such differences almost never change a range, so
    the quantized IR stays byte-identical across them."""
    def snap(x: float, up: bool) -> float:
        if x == 0.0 or not math.isfinite(x):
            return x
        mantissa, exponent = math.frexp(x)
        steps = mantissa * (1 << bits)
        return math.ldexp(math.ceil(steps) if up else math.floor(steps), exponent - bits)
    return snap(float(lo), up=False), snap(float(hi), up=True)


def activation_range_of(stats: Statistics, strategy, bits: int, symmetric: bool):
    """An activation's (lo, hi) from its statistics: the strategy's range widened to
    include 0 and outward to a grid that last-bit differences of float sums do not
    cross (outward_to_grid)."""
    lo, hi = calibrate_range(stats, strategy, bits, symmetric)
    return outward_to_grid(min(lo, 0.0), max(hi, 0.0))


def _clip_to_extrema(stats, lo, hi):
    if isinstance(stats.min, torch.Tensor):
        return stats.min.clamp(min=lo), stats.max.clamp(max=hi)
    return max(stats.min, lo), min(stats.max, hi)


def _cdf(stats):
    h = stats.hist
    total = float(h.sum())
    return torch.cumsum(h, 0) / max(total, 1e-300)


def percentile_range(stats: Statistics, p: float) -> Tuple[float, float]:
    """hi: the value below which p% of the samples lie; lo: the value below which
    (100 - p)% lie (interpolated inside the histogram bin)."""
    cdf = _cdf(stats)
    width = (stats.hist_hi - stats.hist_lo) / stats.bins

    def value_at(frac):
        i = int(torch.searchsorted(cdf, torch.tensor([frac], dtype=torch.float64)).item())
        i = min(i, stats.bins - 1)
        below = float(cdf[i - 1]) if i > 0 else 0.0
        inside = float(cdf[i]) - below
        t = (frac - below) / inside if inside > 0 else 1.0
        return stats.hist_lo + (i + min(max(t, 0.0), 1.0)) * width

    return value_at(1 - p / 100.0), value_at(p / 100.0)


def _abs_hist(stats: Statistics):
    """Histogram of |x| over [0, n * width], with the signed histogram's bin width (finer
    bins would leave every other one empty, a comb that misleads the KL search), filled
    from the signed one by bin centres. Returns (histogram, its upper end)."""
    width = (stats.hist_hi - stats.hist_lo) / stats.bins
    absmax = max(abs(stats.hist_lo), abs(stats.hist_hi))
    n = max(1, min(stats.bins, math.ceil(absmax / max(width, 1e-300) - 1e-9)))
    idx = (stats.bin_centres().abs() / max(width, 1e-300)).floor().clamp(0, n - 1).long()
    h = torch.zeros(n, dtype=torch.float64)
    h.index_add_(0, idx, stats.hist)
    return h, n * width


def kld_range(stats: Statistics, bits: int = 8, widest_of: int = 1) -> Tuple[float, float]:
    """TensorRT's entropy calibration on the |x| histogram: the threshold T whose
    clipped-and-quantized distribution Q is closest (KL(P||Q)) to the reference P;
    `<N>kld` takes the widest of the N thresholds closest to P (the tool chain's way of
    making the choice steadier).

    The bin holding 0 is left out: 0 is exact under every threshold (ranges always
    include it), and the spike of zeros after a ReLU would otherwise, merged with
    its neighbours into one level, push the threshold far down (ReLU6 outputs of
    EfficientNet-Lite0 clipped at 1.3 instead of 6)."""
    h, absmax = _abs_hist(stats)
    h[0] = 0.0
    nonneg = stats.hist_lo >= 0
    levels = (1 << bits) - 1 if nonneg else (1 << (bits - 1)) - 1
    levels = max(levels, 2)
    nbins = h.numel()
    if nbins <= levels:
        return _signed(stats, absmax)
    tried = []
    h_np = h.numpy()
    tail = np.cumsum(h_np[::-1])[::-1]
    step = max(1, (nbins - levels) // 512)
    for i in range(levels, nbins + 1, step):
        p = h_np[:i].copy()
        if i < nbins:
            p[i - 1] += tail[i]
        # merge i bins into `levels` groups, then spread each group's mass over its nonzero bins
        edges = (np.arange(levels + 1) * i / levels).astype(np.int64)
        src = h_np[:i]
        nz = (src != 0)
        group = np.searchsorted(edges, np.arange(i), side="right") - 1
        mass = np.bincount(group, weights=src, minlength=levels)
        cnt = np.bincount(group, weights=nz.astype(np.float64), minlength=levels)
        q = np.where(nz, mass[group] / np.maximum(cnt[group], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if ps <= 0 or qs <= 0:
            continue
        p, q = p / ps, q / qs
        mask = p > 0
        tried.append((float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12)))), i))
    best_t = max(i for _, i in sorted(tried)[:widest_of]) if tried else nbins
    threshold = (best_t + 0.5) * absmax / nbins
    return _signed(stats, threshold)


def _signed(stats, t):
    return (0.0 if stats.hist_lo >= 0 else -t), t


def mse_range(stats: Statistics, bits: int = 8, symmetric: bool = False, candidates: int = 200):
    """The clip range [max(lo, -t), min(hi, t)], t in absmax * (k / candidates), minimising
    the expected squared quantization error over the histogram (rounding plus clipping)."""
    centres = stats.bin_centres()
    h = stats.hist
    lo0, hi0 = min(stats.hist_lo, 0.0), max(stats.hist_hi, 0.0)
    absmax = max(-lo0, hi0)
    t = absmax * torch.arange(1, candidates + 1, dtype=torch.float64)[:, None] / candidates   # [A, 1]
    if symmetric and lo0 < 0:
        lo, hi = -t, t
    else:
        lo, hi = torch.clamp(-t, min=lo0), torch.clamp(t, max=hi0)
    step = (hi - lo).clamp(min=1e-30) / ((1 << bits) - 1)
    x = torch.maximum(torch.minimum(centres[None, :], hi), lo)
    xq = torch.floor((x - lo) / step + 0.5) * step + lo
    err = ((xq - centres[None, :]) ** 2 * h[None, :]).sum(dim=1)
    best = int(torch.argmin(err))
    return float(lo[best, 0]), float(hi[best, 0])


@functools.lru_cache(maxsize=None)
def laplace_alpha(bits: int) -> float:
    """Optimal clip of a Laplace(0, b=1) variable for `bits`-bit uniform quantization:
    argmin over a of 2*exp(-a) + a^2 / (3 * 4^bits) (clipping + rounding noise)."""
    best_a, best_e = 1.0, float("inf")
    a = 0.5
    while a < 40.0:
        e = 2 * math.exp(-a) + a * a / (3 * 4 ** bits)
        if e < best_e:
            best_a, best_e = a, e
        a += 0.001
    return best_a


@functools.lru_cache(maxsize=None)
def gauss_alpha(bits: int) -> float:
    """Optimal clip of a N(0, 1) variable for `bits`-bit uniform quantization: argmin over
    a of the clipping noise 2((a^2 + 1)(1 - Phi(a)) - a phi(a)) plus the rounding noise
    a^2 / (3 * 4^bits) (ACIQ, Banner et al. 2019: 3.92 at 8 bits)."""
    best_a, best_e = 1.0, float("inf")
    a = 0.5
    while a < 40.0:
        tail = 0.5 * math.erfc(a / math.sqrt(2))
        density = math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
        e = 2 * ((a * a + 1) * tail - a * density) + a * a / (3 * 4 ** bits)
        if e < best_e:
            best_a, best_e = a, e
        a += 0.001
    return best_a


def _mean_abs_deviation(stats: Statistics) -> float:
    """b of a Laplace(mu, b) fit: the mean |x - mu|, from the histogram."""
    centres = stats.bin_centres()
    total = float(stats.hist.sum())
    return float((stats.hist * (centres - stats.mean).abs()).sum()) / max(total, 1e-300)


def aciq_range(stats: Statistics, alpha: float):
    """ACIQ: clip at mu +- alpha (alpha the fitted distribution's optimal clip, times the
    strategy's number R in <R>aciq_*), from the minimum up where no value is negative."""
    mu = stats.mean
    if stats.hist_lo >= 0:
        return stats.min, mu + alpha
    return mu - alpha, mu + alpha


def weighted_scale_range(stats: Statistics, bits: int, params: tuple):
    """weighted_scale_param[a,b,c,d], the tool chain's form with given params: the scale is a
    weighted mean alpha * s_pos + (1 - alpha) * s_neg of the scales the running maximum and
    the running minimum's magnitude give alone ((2^bits - 1) / extent), alpha = a where
    the positive side is the larger, else b where the standard deviation exceeds d, else
    c; the range is +-(2^bits - 1) / scale (0 up where nothing is negative). Per-channel
    statistics keep their running ranges, as there.

    The automatic form (a > 1): the tool chain searches alpha with a heuristic that carries
    state from tensor to tensor through the run (its results depend on the order tensors
    are calibrated in) and reads the last batch's values; npuopt takes, per tensor, the
    alpha in [0, 1] (steps of 0.01) whose grid loses least over the tensor's histogram
    (rounding plus clipping, as mse_range counts it), and a side below the tool chain's
    zero band (float32 eps) counts as empty only when it is: the parser's random-weight
    mobilenet_v2 has tensors of magnitude 1e-8, which the band's scale 1 turned to zeros."""
    if isinstance(stats.min, torch.Tensor):
        return stats.running_min, stats.running_max
    levels = float((1 << bits) - 1)
    pos, neg = abs(max(0.0, float(stats.running_max))), abs(min(0.0, float(stats.running_min)))
    a, b, c, d = params
    if a > 1:  # an empty side has no say in alpha
        if pos == neg == 0.0:
            return 0.0, 0.0
        s_pos, s_neg = levels / (pos or neg), levels / (neg or pos)
    else:      # the tool chain's zero band
        band = float(torch.finfo(torch.float32).eps)
        s_pos, s_neg = levels / (pos if pos >= band else levels), levels / (neg if neg >= band else levels)
    signed = float(stats.min) < 0
    if a > 1:
        alpha = torch.linspace(0.0, 1.0, 101, dtype=torch.float64)[:, None]
        extent = levels / (alpha * s_pos + (1 - alpha) * s_neg)                   # [A, 1]
        lo = -extent if signed else torch.zeros_like(extent)
        step = (extent - lo).clamp(min=1e-30) / levels
        x = torch.maximum(torch.minimum(stats.bin_centres()[None, :], extent), lo)
        err = ((torch.floor((x - lo) / step + 0.5) * step + lo - stats.bin_centres()[None, :]) ** 2 *
               stats.hist[None, :]).sum(dim=1)
        best = float(extent[int(torch.argmin(err)), 0])
        return (-best if signed else 0.0), best
    alpha = a if pos > neg else (b if stats.std > d else c)
    extent = levels / (alpha * s_pos + (1 - alpha) * s_neg)
    return (-extent if signed else 0.0), extent
