"""Step 10 of the pipeline: the float and the quantized graph over the metric data,
batch by batch; their metrics, how often their top-1 agrees, a summary of each float
output and the per-layer similarity of the first samples, written into the report."""
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from .consumer import reads_outputs
from .data import call_metric, make_metrics, metric_report, metric_value
from .data_checks import labels_of
from .logger import OPT_INFO
from .quant.compare import dequantized, layer_similarity


class OutputSummary:
    """Running min/max/mean of an output over all batches."""

    def __init__(self):
        self.lo, self.hi, self.total, self.count, self.shape = float("inf"), float("-inf"), 0.0, 0, None

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().float()
        self.lo = min(self.lo, x.min().item())
        self.hi = max(self.hi, x.max().item())
        self.total += x.sum().item()
        self.count += x.numel()
        self.shape = list(x.shape[1:])

    def as_dict(self):
        return {"shape": self.shape, "min": self.lo, "max": self.hi, "mean": self.total / max(self.count, 1)}

    def describe(self) -> str:
        d = self.as_dict()
        return f"shape {d['shape']} per sample, min {d['min']:.6g}, max {d['max']:.6g}, mean {d['mean']:.6g}"


class Agreement:
    """How often the quantized output's argmax (per sample) equals the float one's:
    for a classifier, the share of predictions quantization left unchanged."""

    def __init__(self):
        self.same, self.count = 0, 0

    def add(self, float_out: torch.Tensor, quant_out: torch.Tensor) -> None:
        f = float_out.reshape(float_out.shape[0], -1).argmax(dim=1)
        q = quant_out.reshape(quant_out.shape[0], -1).argmax(dim=1)
        self.same += int((f == q).sum().item())
        self.count += f.numel()

    def fraction(self) -> float:
        return self.same / self.count if self.count else 0.0


class OutputCosine:
    """The mean over samples of the cosine between the quantized output and the float one:
    a figure that moves with every sample's error, where top-1 agreement moves by whole samples."""

    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, float_out: torch.Tensor, quant_out: torch.Tensor) -> None:
        f = float_out.reshape(float_out.shape[0], -1).double()
        q = quant_out.reshape(quant_out.shape[0], -1).double()
        self.total += float(torch.nn.functional.cosine_similarity(f, q, dim=1, eps=1e-30).sum())
        self.count += f.shape[0]

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


class _Pass:
    """What one pass over the metric data gathers."""

    def __init__(self, graphs, cfg, outputs: int):
        self.metrics = {kind: make_metrics(cfg.metric) for kind, _ in graphs}
        for ms in self.metrics.values():
            for _, m in ms:
                m.reset()
        self.summaries = [OutputSummary() for _ in range(outputs)]
        self.agreement = [Agreement() for _ in range(outputs)]
        self.cosine = [OutputCosine() for _ in range(outputs)]
        self.samples, self.first = 0, None


def evaluate(feed, dataset, graphs: List[Tuple[str, object]], report: dict,
             dump: Optional[Callable[[], None]] = None) -> None:
    """Run `graphs` ([("float", g), ("quant", q)], either may be absent) over `dataset`
    and put the figures into `report`; `dump` is called after the float graph's first
    batch, its tensors kept. In a job of several ranks each runs its own batches and
    every rank folds every batch's outputs in batch order (the metrics, the summaries
    and the agreement are then one process's); the first batch is rank 0's."""
    cfg = feed.cfg
    outputs = feed.graph.output_tensors
    run = _Pass(graphs, cfg, len(outputs))
    desc = " + ".join({"float": "float", "quant": "quantized"}[k] for k, _ in graphs) + " forward"
    shard = feed.shard(dataset, cfg.metric_batch_size, "data")
    reads = _reads(shard, graphs, desc)

    def outputs_of(unit: int) -> tuple:
        nonlocal dump
        results, inputs, labels, dump = _one_batch(feed, graphs, reads, dump)
        if unit == 0:
            run.first = [x[:cfg.similarity_data_num] for x in inputs]
        return results, labels, int(inputs[0].shape[0])

    for results, labels, samples in feed.ranks.in_order(len(shard), outputs_of):
        _fold(feed.cfg, run, results, labels, samples)
    kinds = [k for k, _ in graphs]
    _metric_figures(run, kinds, report)
    if kinds == ["float", "quant"]:
        _comparison(run, dict(graphs), outputs, report)
    for t, s in zip(outputs, run.summaries if "float" in kinds else []):
        report["outputs"][t.name] = s.as_dict()
        OPT_INFO(f"output '{t.name}': {s.describe()}")
    report["samples"] = run.samples


def _reads(shard, graphs, desc: str = None) -> Dict[str, object]:
    """Each graph's read of the metric data: one that all share, or, for a dataset that takes
    each batch's outputs back (consumer.py), one per graph, fed that graph's outputs."""
    if not reads_outputs(shard.dataset):
        shared = shard.read(desc)
        return {kind: shared for kind, _ in graphs}
    return {kind: shard.read(desc if i == 0 else None, fed_by=graph) for i, (kind, graph) in enumerate(graphs)}


def _one_batch(feed, graphs, reads, dump):
    """The next batch through every graph: ({kind: outputs}, the quantized ones dequantized),
    the first graph's inputs, the labels, and the dump still to do (None once done)."""
    results, batches = {}, {}
    for kind, graph in graphs:
        read = reads[kind]
        if id(read) not in batches:
            batches[id(read)] = feed.split(next(read)[1])
        inputs, labels = batches[id(read)]
        keep = kind == "float" and dump is not None
        outputs = feed.forward(graph, inputs, keep_tensors=keep)
        if keep:
            dump()
            dump = None
        if kind == "quant":
            outputs = [dequantized(t, v) for t, v in zip(graph.output_tensors, outputs)]
        read.ran(feed.graph_inputs(outputs))  # as the graph's output tensors hold them
        results[kind] = outputs
    first = batches[id(reads[graphs[0][0]])][0]
    return results, first, labels, dump


def _fold(cfg, run: _Pass, results: Dict[str, list], labels, samples: int) -> None:
    """One batch's outputs into the metrics, the summaries and the agreement, in batch order."""
    for kind, outputs in results.items():
        if kind == "float":
            for s, out in zip(run.summaries, outputs):
                s.add(out)
        elif "float" in results:
            for a, c, f, q in zip(run.agreement, run.cosine, results["float"], outputs):
                a.add(f, q)
                c.add(f, q)
        for spec, m in run.metrics[kind]:
            call_metric(spec, m, outputs, labels, labels_of(cfg, run.samples, run.samples + samples))
    run.samples += samples


def _metric_figures(run: _Pass, kinds: List[str], report: dict) -> None:
    for kind in kinds:
        report["metrics"].setdefault(kind, {})
        for spec, m in run.metrics[kind]:
            value = metric_value(spec, m)
            report["metrics"][kind][spec] = value
            OPT_INFO(f"{kind} {spec}: {', '.join(f'{v:.6f}' for v in np.atleast_1d(value))}")
            shown = metric_report(m)
            if shown:
                OPT_INFO(f"{kind} {spec} report: {shown}")


def _comparison(run: _Pass, graphs: Dict[str, object], outputs, report: dict) -> None:
    """The float graph against the quantized one: metric drops, top-1 agreement, per-layer similarity."""
    metrics = report["metrics"]
    metrics["drop"] = {spec: np.subtract(metrics["float"][spec], v).tolist() for spec, v in metrics["quant"].items()}
    report["agreement"] = {t.name: a.fraction() for t, a in zip(outputs, run.agreement)}
    report["output_cosine"] = {t.name: c.mean() for t, c in zip(outputs, run.cosine)}
    for name, value in report["agreement"].items():
        OPT_INFO(f"output '{name}': top-1 of quantized equals top-1 of float on {value:.2%} of samples, "
                 f"mean cosine to float {report['output_cosine'][name]:.6f}")
    if run.first is None:  # the first batch is rank 0's: the other ranks write no report
        return
    rows = layer_similarity(graphs["float"], graphs["quant"], run.first)
    report["layer_similarity"] = rows
    for r in rows[:5]:
        OPT_INFO(f"similarity (worst first): layer '{r['layer']}' ({r['type']}): "
                 f"cosine {r['cosine']:.6f}, mse {r['mse']:.6g}")


def metric_score(feed, dataset, graph, kind: str, batches: int) -> float:
    """The first metric's (first) value of `graph` (`kind` "float" or "quant") over the first
    `batches` batches of the metric data, folded in batch order as evaluate does."""
    cfg = feed.cfg
    run = _Pass([(kind, graph)], cfg, len(feed.graph.output_tensors))
    shard = feed.shard(dataset, cfg.metric_batch_size, "data", limit=batches)
    reads = _reads(shard, [(kind, graph)])

    def outputs_of(unit: int) -> tuple:
        results, inputs, labels, _ = _one_batch(feed, [(kind, graph)], reads, None)
        return results, labels, int(inputs[0].shape[0])

    for results, labels, samples in feed.ranks.in_order(len(shard), outputs_of):
        _fold(cfg, run, results, labels, samples)
    spec, m = run.metrics[kind][0]
    return float(np.atleast_1d(metric_value(spec, m))[0])
