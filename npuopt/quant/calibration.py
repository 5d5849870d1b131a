"""Calibration: every tensor's statistics over the calibration batches (with the cfg's
per-layer bins, momentum and trimming), and statistics (calibrated or read from a
statistic_file) attached to the graph."""
import copy
import math
from typing import Dict, List

import torch

from ..consumer import Reading
from ..errors import ConfigError, QuantizeError
from ..logger import OPT_WARN
from ..node import PyNode
from ..ranks import Ranks
from ..tensor import PyTensor
from .statistics import BatchPart, FiniteValues, Statistics


def measured_of(node: PyNode) -> List[PyTensor]:
    """What calibration measures of a layer: its tops, and its placeholders (the internal
    tensors a layer's float forward keeps, e.g. a recurrent layer's gates and states;
    made by the zero-input forward, before calibration)."""
    return list(node.outputs) + list(node.placeholders)


def measured(graph) -> List[PyTensor]:
    return [t for node in graph.nodes for t in measured_of(node)]


class Calibrator:
    """Statistics of every tensor over the calibration batches, folded in batch order. A
    batch's statistics are those of its whole tensors (extrema over its samples, one
    histogram), also where the graph runs its samples one at a time (PyGraph.forward's
    `whole_batch`): the running means of extrema are over batches of
    calibration_batch_size samples, as the Compass Optimizer's. In a job of several ranks
    each runs its batches, the ranks at a time running batches r, r+1, ... together (a
    step); after each layer they exchange the extrema of its outputs, which fix the
    histogram range every batch is counted in, and after the step every rank folds the
    step's contributions in batch order: the statistics equal one process's."""

    def __init__(self, graph, bins: int, momentum: float, ranks: Ranks = None):
        self.graph = graph
        self.ranks = ranks or Ranks()
        self.stats: Dict[str, Statistics] = {t.name: Statistics(bins, momentum) for t in measured(graph)}
        self.producer = {t.name: n.name for n in graph.nodes for t in measured_of(n)}
        self._warned: List[str] = []  # tensors with NaN/Inf, in the order they were seen
        self._parts: Dict[str, BatchPart] = {}
        self._idle = False            # no unit of this rank in the present step

    def observe(self, node: PyNode) -> None:
        """After `node` ran on this rank's unit (or, with no unit in this step, in its turn)."""
        tensors = [t for t in measured_of(node) if t.name in self.stats]  # (placeholders made since: not)
        values = [None if self._idle or not t.betensor.is_floating_point() else FiniteValues.of(t.betensor)
                  for t in tensors]  # integer tensors are qinvariant (PyGraph.mark_integer_tensors)
        for t, v, span in zip(tensors, values, self._spans(tensors, values)):
            if v is not None:
                self._parts[t.name] = v.part(self.stats[t.name].bins, span)

    def _spans(self, tensors: List[PyTensor], values: List[FiniteValues]) -> list:
        """The histogram range each tensor's values are counted in: the range once the units
        before this one widened it. In a job the ranks exchange their units' extrema, and
        the units of the step before this rank's widen it first."""
        if not self.ranks.parallel:
            return [v and self.stats[t.name].hist_range_after(v.lo, v.hi) for t, v in zip(tensors, values)]
        extrema = torch.tensor([[v.lo, v.hi] if v is not None and v.lo is not None else [math.nan, math.nan]
                                for v in values], dtype=torch.float64).reshape(len(values), 2)
        every = self.ranks.all_gather(extrema)
        spans = []
        for i, t in enumerate(tensors):
            span = None
            for r in range(self.ranks.rank + 1):
                lo, hi = (float(e) for e in every[r][i])
                span = self.stats[t.name].hist_range_after(None if math.isnan(lo) else lo, hi, span)
            spans.append(span)
        return spans

    def _absent(self) -> None:
        """Take part in the exchanges of a step in which this rank has no unit."""
        self._idle = True
        try:
            for node in self.graph.nodes:
                self.observe(node)
        finally:
            self._idle = False

    def run(self, shard) -> Dict[str, Statistics]:
        """Statistics over `shard` (Feed.shard), or over batches of graph inputs in one process."""
        if not hasattr(shard, "read"):
            shard = InMemory(list(shard))
        if len(shard) == 0:
            raise QuantizeError("calibration: the calibration set gave no batch")
        mine = shard.read("calibration", fed_by=self.graph)
        for start in range(0, len(shard), self.ranks.world):
            self._parts = {}
            if start + self.ranks.rank < len(shard):
                _, batch = next(mine)
                mine.ran(self.graph.forward(shard.graph_inputs(batch), after_node=self.observe, whole_batch=True))
            else:
                self._absent()
            for parts in self.ranks.in_order(min(self.ranks.world, len(shard) - start), lambda _: self._parts):
                self._fold(parts)
        if len(self._warned) > 1:  # one warning, not one per tensor the bad values flow into
            more = self._warned[1:]
            OPT_WARN(f"calibration: NaN/Inf values also reached {len(more)} other tensor(s) "
                     f"({', '.join(more[:3])}{', ...' if len(more) > 3 else ''}); left out of their statistics")
        return self.stats

    def _fold(self, parts: Dict[str, BatchPart]) -> None:
        for name, part in parts.items():
            self.stats[name].fold(part)
            if part.nonfinite and name not in self._warned:
                if not self._warned:
                    OPT_WARN(f"calibration: tensor '{name}' (layer '{self.producer[name]}') has NaN/Inf values; "
                             f"they are left out of its statistics")
                self._warned.append(name)


class InMemory(list):
    """Batches of graph inputs at hand, as a one-process Feed.Shard."""

    def read(self, _desc: str = None, fed_by=None):
        return Reading(enumerate(self))

    @staticmethod
    def graph_inputs(batch):
        return batch


def attach_statistics(graph, stats: Dict[str, Statistics], fill_missing: bool = False) -> None:
    """Give each tensor its statistics. With `fill_missing` (ignore_missing_statistic), a
    layer's output that the statistics lack takes those of its first input that has some,
    as the tool chain fills them from the parent layers."""
    stats = dict(stats)
    if fill_missing:
        filled = []
        for node in graph.nodes:
            source = next((stats[t.name] for t in node.inputs if t.name in stats), None)
            for t in node.outputs:
                if t.name not in stats and source is not None:
                    stats[t.name] = copy.deepcopy(source)
                    filled.append(t.name)
        if filled:
            OPT_WARN(f"ignore_missing_statistic: {len(filled)} tensor(s) the statistic_file lacks take their "
                     f"layer's input's statistics: {', '.join(filled[:5])}{' ...' if len(filled) > 5 else ''}")
    missing = [t.name for t in graph.tensors if t.name not in stats]
    if missing:
        raise ConfigError(f"statistics lack tensor(s) {', '.join(missing[:5])}: the statistic_file "
                          f"belongs to another model; delete it to calibrate again"
                          f"{'' if fill_missing else ' (or set ignore_missing_statistic = true)'}")
    for node in graph.nodes:  # placeholders: where the statistics have them (older files may not)
        for t in node.placeholders:
            t.statistics = stats.get(t.name, t.statistics)
    for t in graph.tensors:
        t.statistics = stats[t.name]
        if t.statistics.empty and not t.qinvariant:
            if t.statistics.nonfinite:
                OPT_WARN(f"tensor '{t.name}' had no finite calibration value; its range is [0, 0]")
    plan_mask_ranges(graph)


MASK_REACH = 2.0  # a mask's lowest value, in widths of the widest masked sum's range


def plan_mask_ranges(graph) -> None:
    """Attention masks (statistics.MASKED): a sum of scores and a mask keeps the scores'
    range (the masked values left out of its statistics) and its masked values saturate
    at its grid's bottom; so that they do, the mask itself (0 and "minus infinity", and
    every tensor that holds only such values: the mask's moves, a Mul of 0/1 by the
    lowest float) is given the range [-MASK_REACH * R, 0], R the largest magnitude of the
    tensors that hold scores and masked values (of any tensor where none does), and its
    masked values quantize to its lowest integer. A range set before (a plugin's) stays."""
    stats = [t.statistics for t in graph.tensors if t.statistics is not None and not t.qinvariant]
    masks = [t for t in graph.tensors if t.statistics is not None and t.statistics.mask_only
             and not t.qinvariant and t.planned_range is None]
    if not masks:
        return
    sums = [s for s in stats if s.masked and not s.mask_only]
    reach = MASK_REACH * max((_magnitude(s) for s in (sums or stats) if not s.empty), default=1.0)
    for t in masks:
        other = 0.0 if t.statistics.empty else float(torch.as_tensor(t.statistics.max).max())
        t.planned_range = (min(-reach, other), max(other, 0.0))


def _magnitude(s: Statistics) -> float:
    return max(abs(float(torch.as_tensor(s.min).min())), abs(float(torch.as_tensor(s.max).max())))


class LayerCalibrator(Calibrator):
    """Calibration with the cfg's per-layer running_statistic_momentum and histc_bins, and
    trim_infinity_before_statistic: statistics see the tensor clipped as asked (clip: to
    [lo, hi]; second: to the extreme values strictly inside (min(lo, 0), max(hi, 0))),
    while the forward goes on with the tensor unchanged."""

    def __init__(self, graph, cfg, ranks: Ranks = None):
        super().__init__(graph, cfg.histc_bins, cfg.running_statistic_momentum, ranks)
        self.trims = {}
        for node in graph.nodes:
            bins, momentum = cfg.of("histc_bins", node), cfg.of("running_statistic_momentum", node)
            for t in measured_of(node):
                self.stats[t.name] = Statistics(bins, momentum)
            trim = cfg.of("trim_infinity_before_statistic", node)
            if trim != ("clip", float("-inf"), float("inf")):
                self.trims[node.name] = trim

    def observe(self, node) -> None:
        trim = self.trims.get(node.name)
        if trim is None or self._idle:
            return super().observe(node)
        kept = [t.betensor for t in node.outputs]
        try:
            for t in node.outputs:
                if t.betensor.is_floating_point():
                    t.betensor = trimmed(t.betensor, *trim)
            super().observe(node)
        finally:
            for t, v in zip(node.outputs, kept):
                t.betensor = v


def trimmed(x: torch.Tensor, mode: str, lo: float, hi: float) -> torch.Tensor:
    if mode == "clip":
        return x.clamp(lo, hi)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    inside = x[(x > lo) & (x < hi)]
    if inside.numel() == 0:
        return torch.zeros_like(x)
    return x.clamp(min(inside.min().item(), 0.0), max(inside.max().item(), 0.0))
