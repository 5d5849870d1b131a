"""Issue 12: svd_quant (the Compass Optimizer's SVD-based range search). Its pieces
against references computed here (OPT's smoothing filter, the denoised range of a
low-rank matrix, the spectrum fit's choice against a brute-force search), and the
method on a block whose calibration data has one outlier that widens the extrema
ranges: modes 0-2 plan narrower output ranges and the error on clean data falls;
mode 3 plans FullyConnected weight ranges, only in scope."""
import numpy as np
import pytest
import torch

from npuopt.errors import ConfigError
from npuopt.ir import write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.global_calibration.svd_quant import SpectrumFit, denoised_range, smoothed
from npuopt.quant.weight_plans import planned

from conftest import output_mse, run_cfg

TOKENS, CHANNELS = 16, 32


def test_smoothed_is_opts_third_order_filter():
    assert smoothed([2.0, 2.0, 2.0], 0.9) == pytest.approx(2.0)  # a constant stays (OPT's would shrink)
    a1, a2, a3 = 0.9 * 1.53 / 3, 0.9 * 1.44 / 3, 0.9 * 0.03 / 3
    ax = 1 - a1 - a2 - a3
    y0 = (a1 + a2 + a3) * 1.0 + ax * 1.0  # every state started at the first value
    y1 = a1 * y0 + (a2 + a3) * 1.0 + ax * 3.0
    assert smoothed([1.0, 3.0], 0.9) == pytest.approx(y1)
    assert smoothed([1.0, 3.0], 0.0) == pytest.approx(3.0)  # no momentum: the last value


def _with_singular_values(values):
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(len(values), len(values), generator=gen))  # square: no zero values
    v, _ = torch.linalg.qr(torch.randn(len(values), len(values), generator=gen))
    return u, torch.tensor(values), v.T


def test_denoised_range_drops_the_singular_values_below_opts_threshold():
    """20 singular values: the threshold is the 9% quantile (the second smallest), and
    the values at or below it are dropped; when every value is large, the threshold is
    capped at 1.56 and nothing is dropped."""
    u, s, vh = _with_singular_values([10.0, 5.0] + [0.5 - 0.02 * i for i in range(18)])
    kept = s.clone()
    kept[-2:] = 0  # the two smallest
    want = u @ torch.diag(kept) @ vh
    lo, hi = denoised_range(u @ torch.diag(s) @ vh, 0.09)
    assert (lo, hi) == pytest.approx((float(want.min()), float(want.max())), rel=1e-4)
    u, s, vh = _with_singular_values([10.0 - 0.4 * i for i in range(20)])  # all above 1.56
    full = u @ torch.diag(s) @ vh
    assert denoised_range(full, 0.09) == pytest.approx((float(full.min()), float(full.max())), rel=1e-4)
    assert denoised_range(full.abs() + 0.1, 0.09)[0] == 0.0  # an all-positive output keeps 0 as its low end


class _Node:
    """What SpectrumFit reads of a layer: its settings."""
    def __init__(self):
        from npuopt.quant.settings import QuantSettings
        self.attrs = {"qsettings": QuantSettings(quantize_method_for_activation="per_tensor_asymmetric")}


def test_spectrum_fit_picks_the_factor_of_least_distance():
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(8, 40, generator=gen)
    v[0, 0] = 30.0
    fit = SpectrumFit(_Node(), v)
    factors = torch.linspace(0.5, 2.0, 10).tolist()
    lo, hi = 4 * float(v.min()), 4 * float(v.max())  # a grid four times too coarse
    candidates = [1.0] + factors
    distances = [fit.distance(lo * f, hi * f) for f in candidates]
    best = candidates[int(np.argmin(distances))]
    assert fit.best(lo, hi, factors) == pytest.approx((lo * best, hi * best))
    assert best < 1.0


def block(path):
    """x [1, 16, 32] -> FullyConnected 'fc0' -> FullyConnected 'fc1'; inputs a rank-4
    signal plus noise, and one calibration element 40 (the outlier)."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("block")
    b.input("x", [1, TOKENS, CHANNELS])
    for name, src, scale in (("fc0", "x", 0.3), ("fc1", "fc0", 0.2)):
        b.layer("FullyConnected", name, [src], dict(num_output=CHANNELS),
                {"weights": torch.randn(CHANNELS, CHANNELS, generator=gen) * scale, "biases": torch.zeros(CHANNELS)})
    write_graph(b.build(["fc1"]), str(path / "block.txt"))
    for name in ("calib", "val"):
        x = torch.randn(32, TOKENS, 4, generator=gen) @ torch.randn(4, CHANNELS, generator=gen) \
            + 0.3 * torch.randn(32, TOKENS, CHANNELS, generator=gen)
        if name == "calib":
            x[3, 2, 5] = 40.0
        np.save(path / f"{name}.npy", x.numpy())


def run(path, method):
    name = f"run{len(list(path.glob('*.cfg')))}"
    return run_cfg(path / f"{name}.cfg", graph="block.txt", model_name="block", output_dir=f"out_{name}",
                   dataset="NumpyDataset", calibration_data="calib.npy", calibration_batch_size="8",
                   global_calibration=method, calibration_strategy_for_activation="extrema")


def output_error(master, path):
    return output_mse(master, path / "block.txt", torch.from_numpy(np.load(path / "val.npy")))[0]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    path = tmp_path_factory.mktemp("svd_block")
    block(path)
    return path, run(path, "none")


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_modes_0_to_2_narrow_the_outliers_ranges_and_the_error_falls(plain, mode, caplog):
    path, none = plain
    with caplog.at_level("INFO", logger="npuopt"):
        master = run(path, f"svd_quant[{mode}]")
    assert f"svd_quant (mode {mode}): the output ranges of 3 layers planned" in caplog.text  # x, fc0, fc1
    assert master.graph.tensor("fc0").planned_range is not None
    for t in ("x", "fc0"):  # finer grids than the outlier's extrema gave
        assert master.qgraph.tensor(t).scale > 1.1 * none.qgraph.tensor(t).scale
    # measured 0.0250 (mode 0) and 0.0352 (modes 1, 2) against 0.0485
    assert output_error(master, path) < 0.8 * output_error(none, path)


def test_mode_3_plans_fully_connected_weight_ranges_in_scope_only(plain, caplog):
    path, none = plain
    with caplog.at_level("INFO", logger="npuopt"):
        master = run(path, "svd_quant[3]")
    assert "svd_quant (mode 3): the weight ranges of 2 FullyConnected layers searched" in caplog.text
    factors = torch.linspace(0.5, 2.0, 10)
    for name in ("fc0", "fc1"):
        lo, hi = planned(master.graph.node(name), "planned_ranges", "weights")
        w = master.graph.node(name).get_constant("weights").betensor
        assert torch.isclose(factors, torch.tensor(float(hi) / float(w.abs().max()))).any()
    scoped = run(path, "svd_quant[3][Convolution]")
    assert "weights" not in scoped.graph.node("fc0").attrs.get("planned_ranges", {})


@pytest.mark.parametrize("params, said", [
    ("[4]", "svd_quant's mode must be 0, 1, 2 or 3, got 4"),
    ("[0,2,1]", "svd_quant's beta (1) must be at least its alpha (2)"),
    ("[0,0.5,2,0]", "svd_quant's nsteps must be an integer >= 1, got 0"),
])
def test_bad_params_stop_with_one_line(plain, params, said):
    path, _ = plain
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        run(path, f"svd_quant{params}")
