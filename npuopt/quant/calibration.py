"""Calibration: every tensor's statistics over the calibration batches (with the cfg's
per-layer bins, momentum and trimming), and statistics (calibrated or read from a
statistic_file) attached to the graph."""
from typing import Dict, Iterable, List

import torch

from ..errors import ConfigError, QuantizeError
from ..logger import OPT_WARN
from ..node import PyNode
from .statistics import Statistics


class Calibrator:
    """Statistics of every tensor over the calibration batches."""

    def __init__(self, graph, bins: int, momentum: float):
        self.graph = graph
        self.stats: Dict[str, Statistics] = {t.name: Statistics(bins, momentum) for t in graph.tensors}
        self._warned: List[str] = []  # tensors with NaN/Inf, in the order they were seen

    def observe(self, node: PyNode) -> None:
        for t in node.outputs:
            v = t.betensor
            if not v.is_floating_point():  # integer tensors are qinvariant (PyGraph.mark_integer_tensors)
                continue
            s = self.stats[t.name]
            before = s.nonfinite
            s.update(v)
            if s.nonfinite > before and t.name not in self._warned:
                if not self._warned:
                    OPT_WARN(f"calibration: tensor '{t.name}' (layer '{node.name}') has NaN/Inf values; "
                             f"they are left out of its statistics")
                self._warned.append(t.name)

    def run(self, batches: Iterable[List[torch.Tensor]]) -> Dict[str, Statistics]:
        n = 0
        for inputs in batches:
            self.graph.forward(inputs, after_node=self.observe)
            n += 1
        if n == 0:
            raise QuantizeError("calibration: the calibration set gave no batch")
        if len(self._warned) > 1:  # one warning, not one per tensor the bad values flow into
            more = self._warned[1:]
            OPT_WARN(f"calibration: NaN/Inf values also reached {len(more)} other tensor(s) "
                     f"({', '.join(more[:3])}{', ...' if len(more) > 3 else ''}); left out of their statistics")
        return self.stats


def attach_statistics(graph, stats: Dict[str, Statistics]) -> None:
    missing = [t.name for t in graph.tensors if t.name not in stats]
    if missing:
        raise ConfigError(f"statistics lack tensor(s) {', '.join(missing[:5])}: the statistic_file "
                          f"belongs to another model; delete it to calibrate again")
    for t in graph.tensors:
        t.statistics = stats[t.name]
        if t.statistics.empty and not t.qinvariant:
            if t.statistics.nonfinite:
                OPT_WARN(f"tensor '{t.name}' had no finite calibration value; its range is [0, 0]")


class LayerCalibrator(Calibrator):
    """Calibration with the cfg's per-layer running_statistic_momentum and histc_bins, and
    trim_infinity_before_statistic: statistics see the tensor clipped as asked (clip: to
    [lo, hi]; second: to the extreme values strictly inside (min(lo, 0), max(hi, 0))),
    while the forward goes on with the tensor unchanged."""

    def __init__(self, graph, cfg):
        super().__init__(graph, cfg.histc_bins, cfg.running_statistic_momentum)
        self.trims = {}
        for node in graph.nodes:
            bins, momentum = cfg.of("histc_bins", node), cfg.of("running_statistic_momentum", node)
            for t in node.outputs:
                self.stats[t.name] = Statistics(bins, momentum)
            trim = cfg.of("trim_infinity_before_statistic", node)
            if trim != ("clip", float("-inf"), float("inf")):
                self.trims[node.name] = trim

    def observe(self, node) -> None:
        trim = self.trims.get(node.name)
        if trim is None:
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
