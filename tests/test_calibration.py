"""Statistics gathered batch by batch, every calibration strategy, the statistic file."""
import math

import pytest
import torch

from conftest import REPO
from npuopt.errors import ConfigError
from npuopt.quant.calibration import Calibrator, measured_of
from npuopt.quant.statistics import Statistics, histogram, load_statistics, save_statistics
from npuopt.quant.strategies import calibrate_range, check_strategy, laplace_alpha

torch.manual_seed(0)


def test_extrema_running_means_and_moments():
    s = Statistics(bins=64, momentum=0.5)
    s.update(torch.tensor([0.0, 1.0, 2.0]))
    s.update(torch.tensor([-2.0, 4.0]))
    assert (s.min, s.max) == (-2.0, 4.0)
    assert s.running_min == pytest.approx(0.5 * 0 + 0.5 * -2) and s.running_max == pytest.approx(3.0)
    assert s.mean == pytest.approx(1.0) and s.count == 5
    assert s.std == pytest.approx(math.sqrt((0 + 1 + 4 + 4 + 16) / 5 - 1))
    assert float(s.hist.sum()) == 5


def test_histogram_grows_and_keeps_counts():
    s = Statistics(bins=128)
    s.update(torch.rand(1000))
    s.update(torch.rand(1000) * 10 - 20)
    s.update(torch.rand(1000) + 30)
    assert float(s.hist.sum()) == 3000
    assert s.hist_lo <= s.min < -19 and s.hist_hi >= s.max > 30
    # the mass below 0 is the second batch's
    below = float(s.hist[s.bin_centres() < 0].sum())
    assert below == pytest.approx(1000, abs=20)


@pytest.mark.parametrize("bins", [2048, 1000, 7, 513])
def test_histogram_counts_what_histc_counts(bins):
    """Random values over six decades, ranges wider than the values, and values on the
    float32 bin edges themselves: the same counts as torch.histc (the Compass Optimizer's)."""
    gen = torch.Generator().manual_seed(bins)
    for trial in range(300):
        scale = 10.0 ** (trial % 12 - 6)
        x = torch.randn(int(torch.randint(1, 3000, (), generator=gen)), generator=gen) * scale + scale * (trial % 3)
        lo, hi = float(x.min()), float(x.max())
        if trial % 2:
            lo, hi = lo - scale * 0.7, hi + scale * 0.2
        hi = hi if hi > lo else lo + max(abs(lo), 1.0) * 1e-6
        if trial % 4 == 0:
            edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float32)
            k = min(x.numel(), bins + 1)
            x[:k] = edges[torch.randint(0, bins + 1, (k,), generator=gen)]
        got = histogram(x, bins, lo, hi, float(x.min()), float(x.max()))
        assert torch.equal(got, torch.histc(x, bins, lo, hi).double()), (trial, lo, hi)


def test_per_channel_extrema():
    s = Statistics(bins=32, axis=-1)
    x = torch.randn(4, 5, 3)
    s.update(x)
    assert torch.allclose(s.min.float(), x.amin(dim=(0, 1)))
    assert torch.allclose(s.max.float(), x.amax(dim=(0, 1)))
    lo, hi = calibrate_range(s, "99percentile")
    assert lo.shape == (3,) and bool((lo >= s.min).all()) and bool((hi <= s.max).all())


def test_nonfinite_values_are_left_out():
    s = Statistics(bins=16)
    s.update(torch.tensor([1.0, float("nan"), -1.0, float("inf")]))
    assert (s.min, s.max, s.nonfinite, s.count) == (-1.0, 1.0, 2, 2)


@pytest.fixture
def gaussian():
    s = Statistics(bins=2048)
    for i in range(5):
        x = torch.randn(20000)
        if i == 2:
            x[0] = 40.0                 # one outlier
        s.update(x)
    return s


@pytest.mark.parametrize("strategy", ["extrema", "mean", "99.99percentile", "99percentile", "3std", "kld",
                                      "mse", "aciq_laplace"])
def test_every_strategy_gives_a_sane_range(gaussian, strategy):
    lo, hi = calibrate_range(gaussian, strategy)
    assert gaussian.min <= lo < 0 < hi <= gaussian.max
    if strategy == "extrema":
        assert hi == 40.0
    elif strategy in ("mean", "mse"):    # one outlier of 100001 still weighs (40-t)^2 in the MSE
        assert hi < 40.0
    else:                               # every clipping strategy ignores the outlier
        assert 1.5 < hi < 12, (strategy, hi)


def test_percentile_and_std_values(gaussian):
    lo, hi = calibrate_range(gaussian, "99percentile")
    assert hi == pytest.approx(2.326, abs=0.05) and lo == pytest.approx(-2.326, abs=0.05)
    lo, hi = calibrate_range(gaussian, "3std")
    assert hi == pytest.approx(3 * gaussian.std + gaussian.mean)


def test_nonnegative_tensor_keeps_zero_floor():
    s = Statistics(bins=512)
    s.update(torch.relu(torch.randn(50000)))
    for strategy in ("kld", "mse", "aciq_laplace", "99.9percentile"):
        lo, hi = calibrate_range(s, strategy)
        assert lo == pytest.approx(0.0, abs=1e-3) and 1.0 < hi <= s.max


def test_kld_ignores_the_spike_of_zeros_after_relu6():
    # like a ReLU6 output of EfficientNet-Lite0: 40% exact zeros, an exponential tail
    # up to 6. Merging the zeros' bin with its neighbours used to clip at ~1.5,
    # cutting off 9% of the values.
    g = torch.Generator().manual_seed(0)
    x = (torch.empty(200000).exponential_(1.0, generator=g) * 0.8).clamp(max=6.0)
    x[:80000] = 0.0
    s = Statistics(bins=2048)
    s.update(x)
    lo, hi = calibrate_range(s, "kld")
    assert lo == 0.0 and float((x > hi).float().mean()) < 0.01


def test_laplace_alpha_table():
    assert laplace_alpha(8) == pytest.approx(9.89, abs=0.02)
    assert laplace_alpha(4) == pytest.approx(5.03, abs=0.02)


def test_unknown_strategy_lists_known_ones():
    with pytest.raises(ConfigError, match="known: extrema, mean"):
        check_strategy("median")
    with pytest.raises(ConfigError):
        calibrate_range(Statistics(), "bogus")
    assert check_strategy("99.9Percentile") == "99.9percentile"


def test_statistic_file_round_trip(tmp_path):
    a = Statistics(bins=64)
    a.update(torch.randn(1000))
    b = Statistics(bins=64, axis=0)
    b.update(torch.randn(3, 10))
    path = tmp_path / "stats.pt"
    save_statistics(str(path), {"a": a, "b": b}, {"model": "m"})
    back = load_statistics(str(path))
    assert back["a"].min == a.min and torch.equal(back["a"].hist, a.hist)
    assert torch.equal(back["b"].max, b.max)
    for strategy in ("kld", "mean", "99percentile"):
        assert calibrate_range(back["a"], strategy) == calibrate_range(a, strategy)
    path.write_text("garbage")
    with pytest.raises(ConfigError, match="statistic_file"):
        load_statistics(str(path))


# ---- the batch is the unit, however the graph runs it ------------------------------------
def gru_graph():
    """The parser's bidirectional GRU (op_tests/parser_gru_bi): its IR fixes batch 1, so a
    batch runs one sample at a time; its GRU layers keep their gates as placeholders."""
    import npuopt.ops  # noqa: F401
    from npuopt.ir import read_graph
    txt = REPO / "op_tests" / "parser_gru_bi" / "parser_gru_bi.txt"
    graph = read_graph(str(txt), str(txt.with_suffix(".bin")))
    assert not graph.keeps_samples_apart()
    return graph


def seen_by(store: dict):
    """An after_node that keeps, per layer and call, the values of its tops and placeholders."""
    def after(node):
        store.setdefault(node.name, []).append([t.betensor.clone() for t in measured_of(node)])
    return after


def test_a_batch_run_one_sample_at_a_time_shows_after_node_the_whole_batch():
    """With whole_batch the samples go through the layers together: after each layer, its
    tops and placeholders hold every sample's values, concatenated in order, and the
    outputs are those of the samples run one by one."""
    graph = gru_graph()
    x = torch.randn(3, 50, 10, generator=torch.Generator().manual_seed(1))
    together, alone = {}, {}
    got = graph.forward([x], after_node=seen_by(together), whole_batch=True)
    want = graph.forward([x], after_node=seen_by(alone))
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert together.keys() == alone.keys() and any(n.placeholders for n in graph.nodes)
    for name, calls in alone.items():
        assert len(calls) == 3 and len(together[name]) == 1
        assert len(together[name][0]) == len(calls[0])
        for batch_value, *sample_values in zip(together[name][0], *calls):
            assert torch.equal(batch_value, torch.cat(sample_values))


def test_calibration_takes_a_batch_run_one_sample_at_a_time_as_one():
    """Calibration's unit of statistics is the batch, as the tool chain's: each batch adds
    the extrema of all its samples to the running means (not each sample its own), one
    histogram of them all, as a graph that runs the batch as one gives."""
    graph = gru_graph()
    data = torch.randn(8, 50, 10, generator=torch.Generator().manual_seed(2))
    batches = [[data[:5]], [data[5:]]]
    stats = Calibrator(graph, 256, 0.9).run(batches)
    alone = {}
    for i in range(len(data)):
        graph.forward([data[i:i + 1]], after_node=seen_by(alone))
    want = {name: Statistics(256, 0.9) for name in stats}
    for samples in (range(5), range(5, 8)):
        for node in graph.nodes:
            for t, *values in zip(measured_of(node), *(alone[node.name][i] for i in samples)):
                if t.name in want and values[0].is_floating_point():
                    want[t.name].update(torch.cat(values))
    assert stats.keys() == want.keys()
    for name, s in stats.items():
        for key, value in s.state_dict().items():
            other = want[name].state_dict()[key]
            assert (torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other), (name, key)
    inputs = stats[graph.input_tensors[0].name]
    assert inputs.running_max == pytest.approx(0.9 * float(data[:5].max()) + 0.1 * float(data[5:].max()))
