"""The sums `Problem` (_layers.py) is made of: E[x_q x_q^T], E[W x_f x_q^T] and the
means over patches of a layer's input drawn evenly from the calibration set, made
per calibration unit and added in unit order, so that a job of several ranks (each
holding its units, npuopt/ranks.py) gets one process's numbers."""
import math
from typing import List

import torch

from ...errors import QuantizeError
from ...registry import OP_PATCHES
from ..compare import dequantized

PATCH_BUDGET = 1 << 24   # patch values one Gram product reads at once (64 MB in float32)
POSITIONS = 1 << 16      # patches a layer's Gram matrices are estimated from, at most
PATCH_VALUES = 1 << 26   # and values of those patches, at most
ROWS = 4096              # weight rows taken to float64 at once


def patches(node, x: torch.Tensor, rows: torch.Tensor, qt=None) -> torch.Tensor:
    """Patches `rows` of the layer's input x as [groups, rows, K] in float32, as its layer
    type gives them (registry.patches_register); x holds `qt`'s integers when qt is given.
    Gathered straight from x: a layer's input is far larger than the patches used."""
    return OP_PATCHES.get(node.type)(node, x, rows, lambda v: _real(v, qt))


def _real(v: torch.Tensor, qt) -> torch.Tensor:
    return (dequantized(qt, v) if qt is not None else v).to(torch.float32)


def grams(node, xf: List[torch.Tensor], xq: List[torch.Tensor], qt, w: torch.Tensor, units: "Units",
          centred: bool = False) -> tuple:
    """(S, X, E[x_q] [groups, K], E[y_f x_q^T] [groups, rows, K], E[y_f] [groups, rows])
    over the patches x_q of the layer's input in the quantized graph, with y_f = W x_f
    the float layer's output before its biases and activation (weights w [groups, rows,
    K]): the float side needs no K x K matrix; where the layer has more rows than
    inputs, the cross term is a RowsTimes. S is E[x_q x_q^T] [groups, K,
    K] and X None, or, from fewer patches than half of K, X the patches themselves
    [groups, P, K] and S None (both float32, as is the cross term, the means float64).
    `centred`: the cross-covariance E[y_f x_q^T] - E[y_f] E[x_q]^T in place of the
    cross term (made in float64 before the layer's rows multiply it, where they do).
    Over at most POSITIONS patches (and PATCH_VALUES values: a depthwise layer's K x K
    Grams need fewer) drawn evenly from the calibration set, the same ones for a given
    set (reproducible); xq
    are `qt`'s integers. Patches whose values are not finite are left out, as
    calibration leaves them out of the statistics. xf and xq hold this rank's elements
    (`units`); the sums are made per calibration unit and added in unit order, so that
    they do not depend on the number of ranks."""
    out = node.outputs[0]
    per_sample = math.prod(int(d) for d in out.ir_shape[1:-1]) if len(out.ir_shape) > 2 else 1
    width = w.shape[0] * w.shape[-1]
    sizes = units.every_size([per_sample * int(f.shape[0]) for f in xf])
    share = min(1.0, min(POSITIONS, PATCH_VALUES // width) / sum(sizes))
    low_rank = 2 * sum(math.ceil(n * share) for n in sizes) < w.shape[-1]
    step = max(1, PATCH_BUDGET // width)
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randperm(n, generator=gen)[:math.ceil(n * share)].sort().values for n in sizes]

    # E[y_f x_q^T] = W E[x_f x_q^T]: summed as the latter where the layer has more rows than
    # inputs (a decoder's head: 576 x 576 rather than 49,152 x 576 per patch chunk)
    by_inputs = w.shape[1] > w.shape[-1]

    def unit_sums(unit: int) -> tuple:
        sums, kept, count = {}, [], 0
        for i in units.elements_of(unit):
            f, q, chosen = xf[i], xq[i], rows[units.position(i)].to(xf[i].device)
            for j in range(0, len(chosen), step):
                pq = patches(node, q, chosen[j:j + step], qt)
                pf = patches(node, f, chosen[j:j + step])
                yf = pf if by_inputs else pf @ w.transpose(1, 2)
                finite = torch.isfinite(yf).all(2).all(0) & torch.isfinite(pq).all(2).all(0)
                if not bool(finite.all()):  # NaN/Inf the calibration left out of the statistics
                    pq, yf = pq[:, finite], yf[:, finite]
                terms = {"mean_q": pq.sum(1).double(), "cross": (yf.transpose(1, 2) @ pq).double(),
                         "mean_out": yf.sum(1).double()}
                if low_rank:
                    kept.append(pq)
                else:
                    terms["gram"] = pq.transpose(1, 2) @ pq
                _add(sums, terms)
                count += pq.shape[1]
        return sums, kept, count

    sums, kept, count = {}, [], 0
    for unit_terms, unit_kept, unit_count in units.ranks.in_order(units.count, unit_sums):
        _add(sums, {key: value.to(w.device) for key, value in unit_terms.items()})
        kept.extend(p.to(w.device) for p in unit_kept)
        count += unit_count
    if count == 0:
        raise QuantizeError(f"layer '{node.name}': no input patch of the calibration data is finite; "
                            f"its weights cannot be rounded from data")
    for total in sums.values():
        total /= count
    if centred:
        sums["cross"].baddbmm_(sums["mean_out"].unsqueeze(2), sums["mean_q"].unsqueeze(1), alpha=-1)
    if by_inputs:  # E[x_f x_q^T] and E[x_f] to the layer's rows (the first when asked: RowsTimes)
        sums["cross"] = RowsTimes(w, sums["cross"])
        sums["mean_out"] = _rows_times(w, sums["mean_out"].unsqueeze(-1), torch.float64).squeeze(-1)
    else:
        sums["cross"] = sums["cross"].to(torch.float32)
    return (None, torch.cat(kept, dim=1)) if low_rank else (sums["gram"], None), sums["mean_q"], sums["cross"], \
        sums["mean_out"]


class RowsTimes:
    """w [groups, rows, K] @ m [groups, K, n] (float64) kept as its factors, its rows made
    in float32 when asked for: a decoder's head's cross term is 113 MB, and the methods
    read it a few rows at a time (Problem.parts)."""

    def __init__(self, w: torch.Tensor, m: torch.Tensor):
        self.w, self.m = w, m

    def rows(self, r0: int, r1: int) -> torch.Tensor:
        return (self.w[:, r0:r1].double() @ self.m).to(torch.float32)


def _rows_times(w: torch.Tensor, m: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """w [groups, rows, K] @ m [groups, K, n] in float64, ROWS rows of w at a time, kept
    as `dtype` (a decoder's head's in float64 at once is 226 MB more)."""
    out = torch.empty(w.shape[0], w.shape[1], m.shape[-1], dtype=dtype, device=w.device)
    for r in range(0, w.shape[1], ROWS):
        out[:, r:r + ROWS] = w[:, r:r + ROWS].double() @ m
    return out


def _add(sums: dict, terms: dict) -> None:
    for key, value in terms.items():
        if key in sums:
            sums[key] += value
        else:
            sums[key] = value


class Units:
    """Where this rank's calibration elements (the batches a Stream holds, or their samples
    where the graph runs samples one by one) sit among every rank's: element i of this
    rank belongs to calibration unit `unit_of[i]`."""

    def __init__(self, ranks, count: int, unit_of: List[int]):
        self.ranks, self.count, self.unit_of = ranks, count, unit_of
        self._positions = None

    def elements_of(self, unit: int) -> List[int]:
        return [i for i, u in enumerate(self.unit_of) if u == unit]

    def every_size(self, sizes: List[int]) -> List[int]:
        """The sizes of every rank's elements (this rank's: `sizes`), in unit order."""
        every = sorted((u, r, i, n) for r, (units, local) in enumerate(self.ranks.gather((self.unit_of, sizes)))
                       for i, (u, n) in enumerate(zip(units, local)))
        self._positions = {i: k for k, (_, r, i, _) in enumerate(every) if r == self.ranks.rank}
        return [n for *_, n in every]

    def position(self, i: int) -> int:
        """Element i of this rank in the order of every rank's elements (after every_size)."""
        return self._positions[i]
