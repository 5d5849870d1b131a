"""Checks of the data before any work: the first samples of the calibration and metric
data through the float graph, and every label through every metric, so that data,
labels or constants that do not fit stop the run with one line before time is spent."""
import os

import torch

from .consumer import reads_outputs, refuse_in_job
from .data import batches, call_metric, collate_of, dataset_named, label_batches, make_dataset, make_metrics
from .errors import ConfigError, DatasetError, IRError, NpuoptError


def probe(feed, dataset, size: int, field: str):
    """The float graph's outputs on the first `size` samples of the dataset read for the cfg
    field `field` (at least the IR's batch of them: an IR whose first input's first axis is
    not 1, a 1-D input of ids say, may need all of it), and their labels: data that does
    not fit the model, or constants that overflow float32 on it, stop the run here. A
    dataset that takes each batch's outputs back (consumer.py) is probed with its first
    sample only, which needs none; in a job of several ranks it stops the run here."""
    refuse_in_job(dataset, dataset_named(feed.cfg.dataset, field), feed.ranks)
    first = feed.graph.input_tensors[0].ir_shape if feed.graph.input_tensors else ()
    n = min(len(dataset), 1 if reads_outputs(dataset) else max(size, int(first[0]) if len(first) else 1))
    subset = torch.utils.data.Subset(dataset, range(n))
    batch = next(batches(subset, feed.cfg.dataset, n, 0, collate_fn=collate_of(dataset), field=field))
    try:
        inputs, labels = feed.split(batch)
    except DatasetError as e:  # samples that do not fit the graph's inputs: name the file too
        raise DatasetError(f"{field} '{getattr(feed.cfg, field)}': {e}") from None
    return feed.forward(feed.graph, inputs, after_node=check_overflow), labels


def zero_forward(graph, cfg, device) -> None:
    """The float graph's forward on all-zero inputs of the IR's shapes: every layer's params
    and computed shapes checked. Where a layer that reads a graph input directly fails (on
    an input of the wrong rank, say, or on a param of its own), its line also names that
    input, its shape and file, and the data files that feed it: either may be the culprit."""
    try:
        graph.zero_forward(device=device)
    except NpuoptError as e:
        layer = graph.running
        read = [t for t in (layer.inputs if layer is not None else ()) if t in graph.input_tensors]
        if not read:
            raise
        data = [f"{field} '{getattr(cfg, field)}'" for field in ("calibration_data", "data") if getattr(cfg, field)]
        raise type(e)(f"{e}; it reads graph input '{read[0].name}' of '{cfg.graph}', shape "
                      f"{list(read[0].ir_shape)} ({len(read[0].ir_shape)} axes)"
                      + (f", fed by {', '.join(data)}" if data else "")) from None


def check_calibration_data(feed) -> None:
    """The calibration set's first samples through the float graph, when calibration
    will read it (not a statistic_file)."""
    cfg = feed.cfg
    if cfg.skip_optimization or not cfg.calibration_data or os.path.isfile(cfg.statistic_file):
        return
    if not cfg.dataset:
        raise ConfigError("field 'dataset' is required to read calibration_data")
    probe(feed, make_dataset(cfg.dataset, cfg.calibration_data, field="calibration_data"), 2, "calibration_data")


def labels_of(cfg, start: int, stop: int) -> str:
    """Where samples start..stop-1 of the metric data take their labels from, for messages."""
    source = f"label file '{cfg.label}'" if cfg.label else f"dataset '{cfg.dataset}'"
    return f"{source} (samples {start}-{stop - 1})"


def open_metric_data(feed):
    """Open `data` (with `label`) and the metrics, and put the first metric batch through
    the float graph and every metric (a metric may read several samples of a batch),
    then every label of the file through every metric: data or labels that do not fit
    the model or the metrics stop the run here. Returns the dataset."""
    cfg = feed.cfg
    dataset = make_dataset(cfg.dataset, cfg.data, cfg.label or None, field="data")
    metrics = make_metrics(cfg.metric)  # unknown metrics and bad arguments, before any forward
    outputs, labels = probe(feed, dataset, cfg.metric_batch_size, "data")
    for spec, metric in metrics:
        metric.reset()
        call_metric(spec, metric, outputs, labels, labels_of(cfg, 0, outputs[0].shape[0]))
    check_labels(cfg, dataset, metrics, outputs)
    return dataset


def check_labels(cfg, dataset, metrics, outputs) -> None:
    """Every label of a built-in dataset through every metric, beside all-zero outputs of
    the model's shapes, batch by batch: a bad label anywhere in the file stops the run
    now, not after calibration."""
    for start, batch in label_batches(dataset, cfg.dataset, cfg.metric_batch_size):
        zeros = [torch.zeros((len(batch),) + tuple(o.shape[1:]), dtype=o.dtype, device=o.device) for o in outputs]
        for spec, metric in metrics:
            call_metric(spec, metric, zeros, batch, labels_of(cfg, start, start + len(batch)))


def check_overflow(node) -> None:
    """A float layer with constants whose output holds Inf or NaN from finite inputs: its
    constants overflow float32 (weights near 3e38, say); one line naming the layer. A Constant
    layer hands its values on as they are (an attention mask's -inf)."""
    if node.quantized or not node.constants or node.type == "Constant" or _finite(node.outputs) \
            or not _finite(node.inputs):
        return
    sizes = ", ".join(f"{k} up to {float(c.betensor.abs().max()):.3g}" for k, c in node.constants.items()
                      if c.betensor.is_floating_point() and c.betensor.numel())
    raise IRError(f"layer '{node.name}' ({node.type}): its float32 output overflows to Inf/NaN from finite inputs "
                  f"on the first samples; check its constants ({sizes})")


def _finite(tensors) -> bool:
    return all(bool(torch.isfinite(t.betensor).all()) for t in tensors if t.betensor.is_floating_point())
