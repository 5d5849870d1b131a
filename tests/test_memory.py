"""Issue 13: memory follows the model and the batch, not metric_batch_size or the number
of images. The evaluation runs each batch in chunks that fit a working-memory budget
(OptMaster.forward, PyGraph.samples_within); statistics sum in fixed-size slices.
bench/bench_memory.py measures the Lite0 model test's peak."""
import math

import torch

import npuopt.feed as feed
from npuopt.graph import WORKING_COPIES
from npuopt.quant.statistics import SUM_SLICE, Statistics
from test_pipeline import run


def test_samples_within_follows_the_largest_tensor(tmp_path):
    master, _ = run(tmp_path, data="")
    graph = master.graph
    largest = max(math.prod(t.ir_shape) for t in graph.tensors)
    per_sample = WORKING_COPIES * 8 * largest
    assert graph.samples_within(per_sample * 3) == 3
    assert graph.samples_within(per_sample * 3 - 1) == 2
    assert graph.samples_within(1) == 1  # at least one sample


def test_chunked_evaluation_gives_the_same_report(tmp_path, monkeypatch):
    for name in ("whole", "chunked"):
        (tmp_path / name).mkdir()
    master, whole = run(tmp_path / "whole")
    per_sample = WORKING_COPIES * 8 * max(math.prod(t.ir_shape) for t in master.graph.tensors)
    calls = []
    forward = type(master.qgraph).forward

    def counting(self, inputs, **kwargs):
        calls.append(inputs[0].shape[0])
        return forward(self, inputs, **kwargs)

    monkeypatch.setattr(feed, "FORWARD_BUDGET", per_sample * 3)
    monkeypatch.setattr(type(master.qgraph), "forward", counting)
    _, chunked = run(tmp_path / "chunked")
    # metric batches of 25 ran 3 samples at a time (calibration keeps its batches of 16)
    assert 3 in calls and 25 not in calls
    assert chunked["metrics"] == whole["metrics"]
    assert chunked["agreement"] == whole["agreement"]


def test_statistics_sum_in_slices_as_over_the_whole():
    x = torch.randn(SUM_SLICE * 2 + 12345, generator=torch.Generator().manual_seed(0)) * 3 + 1
    s = Statistics()
    s.update(x)
    d = x.double()
    assert s.count == x.numel()
    assert math.isclose(s.mean, float(d.mean()), rel_tol=1e-9)
    assert math.isclose(s.std, float(d.std(unbiased=False)), rel_tol=1e-9)
