"""Calibration strategies against simple reference implementations written here on the
raw samples (NumPy loops, no histogram tricks): each strategy's range must be as good,
by the reference's own measure, as the reference's best."""
import math

import numpy as np
import pytest
import torch

from npuopt.quant.statistics import Statistics
from npuopt.quant.strategies import calibrate_range, kld_range, mse_range, percentile_range

BINS = 2048


def samples(kind: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if kind == "gaussian":
        return rng.standard_normal(200_000)
    if kind == "laplace":
        return rng.laplace(0.0, 0.7, 200_000)
    if kind == "relu_heavy_tail":  # ReLU of a heavy-tailed variable: nonnegative, long tail
        return np.maximum(rng.standard_t(3, 200_000), 0.0)
    raise ValueError(kind)


def stats_of(x: np.ndarray) -> Statistics:
    s = Statistics(BINS)
    s.update(torch.from_numpy(x.astype(np.float32)))
    return s


def quantization_mse(x: np.ndarray, lo: float, hi: float, bits: int) -> float:
    """Mean squared error of clipping x to [lo, hi] and rounding to 2^bits uniform levels."""
    step = (hi - lo) / ((1 << bits) - 1)
    xc = np.clip(x, lo, hi)
    return float(np.mean((np.round((xc - lo) / step) * step + lo - x) ** 2))


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "relu_heavy_tail"])
@pytest.mark.parametrize("bits", [4, 8])
def test_mse_is_as_good_as_a_brute_force_search(kind, bits):
    x = samples(kind)
    lo0, hi0 = min(x.min(), 0.0), x.max()
    # the reference: every clip t on a fine grid, the error measured on the samples themselves
    grid = np.linspace(max(-lo0, hi0) / 400, max(-lo0, hi0), 400)
    best = min(quantization_mse(x, max(lo0, -t), min(hi0, t), bits) for t in grid)
    lo, hi = mse_range(stats_of(x), bits)
    assert quantization_mse(x, lo, hi, bits) <= best * 1.03, (kind, bits, lo, hi)
    # and clipping matters: extrema are clearly worse where tails are long
    if kind != "gaussian" or bits == 4:
        assert quantization_mse(x, lo0, hi0, bits) > best * 1.1


def reference_kl(x_abs: np.ndarray, threshold_bin: int, levels: int, bins: int, absmax: float) -> float:
    """KL(P || Q) of TensorRT's entropy calibration, written out plainly: P is the |x|
    histogram cut at `threshold_bin` with the tail added to its last bin (the bin of 0
    left out, as npuopt does: 0 is exact at every threshold); Q merges P's bins into
    `levels` groups and spreads each group's mass evenly over its nonzero bins."""
    hist, _ = np.histogram(x_abs, bins=bins, range=(0.0, absmax))
    hist = hist.astype(np.float64)
    hist[0] = 0.0
    p = hist[:threshold_bin].copy()
    p[-1] += hist[threshold_bin:].sum()
    q = np.zeros(threshold_bin)
    for g in range(levels):
        start = g * threshold_bin // levels
        stop = (g + 1) * threshold_bin // levels
        chunk = hist[start:stop]
        nonzero = chunk != 0
        if nonzero.any():
            q[start:stop][nonzero] = chunk.sum() / nonzero.sum()
    p, q = p / p.sum(), q / q.sum()
    m = p > 0
    return float(np.sum(p[m] * np.log(p[m] / np.maximum(q[m], 1e-12))))


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "relu_heavy_tail"])
def test_kld_threshold_is_as_good_as_the_reference_best(kind):
    bits = 8
    x = samples(kind)
    absmax = float(np.abs(x).max())
    levels = 255 if x.min() >= 0 else 127
    x_abs = np.abs(x)
    kls = {i: reference_kl(x_abs, i, levels, BINS, absmax) for i in range(levels, BINS + 1, 4)}
    best_bin = min(kls, key=kls.get)
    lo, hi = kld_range(stats_of(x), bits)
    chosen_bin = min(max(int(round(hi / absmax * BINS - 0.5)), levels), BINS)
    chosen = reference_kl(x_abs, chosen_bin, levels, BINS, absmax)
    assert chosen <= kls[best_bin] * 1.05 + 1e-4, (kind, hi, chosen_bin, best_bin, chosen, kls[best_bin])
    assert (lo == 0.0) == (x.min() >= 0) and (lo == -hi or lo == 0.0)


@pytest.mark.parametrize("bits", [4, 8])
def test_aciq_laplace_matches_the_closed_form_fit(bits):
    x = samples("laplace")
    mu = float(x.mean())
    b = float(np.mean(np.abs(x - mu)))
    # the reference alpha: minimise clipping noise 2 b^2 exp(-a/b) + rounding noise (2a)^2 / (12 * 4^bits)
    a_grid = np.linspace(0.5, 40.0, 400_000)
    alpha = float(a_grid[np.argmin(2 * np.exp(-a_grid) + a_grid ** 2 / (3 * 4 ** bits))])
    lo, hi = calibrate_range(stats_of(x), "aciq_laplace", bits)
    assert hi == pytest.approx(mu + alpha * b, rel=0.01)
    assert lo == pytest.approx(mu - alpha * b, rel=0.01)
    lo, hi = calibrate_range(stats_of(x), "0.5aciq_laplace", bits)   # <R>aciq_laplace: R times the clip
    assert hi == pytest.approx(mu + 0.5 * alpha * b, rel=0.01)


@pytest.mark.parametrize("bits", [4, 8])
def test_aciq_gauss_matches_the_closed_form_fit(bits):
    """ACIQ for a Gaussian: clip at mu +- alpha * std, alpha minimising clipping noise
    2((a^2+1)(1-Phi(a)) - a phi(a)) plus rounding noise a^2 / (3 * 4^bits), computed here on
    a grid with SciPy-free NumPy (the paper's table: 2.55 at 4 bits, 3.92 at 8)."""
    x = samples("gaussian") * 2.0 + 0.5
    mu, std = float(x.mean()), float(x.std())
    a = np.linspace(0.5, 12.0, 200_000)
    tail = 0.5 * np.array([math.erfc(v / math.sqrt(2)) for v in a[::100]])
    grid = a[::100]
    noise = 2 * ((grid ** 2 + 1) * tail - grid * np.exp(-grid ** 2 / 2) / math.sqrt(2 * math.pi)) \
        + grid ** 2 / (3 * 4 ** bits)
    alpha = float(grid[np.argmin(noise)])
    assert alpha == pytest.approx({4: 2.55, 8: 3.92}[bits], abs=0.02)
    lo, hi = calibrate_range(stats_of(x), "aciq_gauss", bits)
    assert hi == pytest.approx(min(mu + alpha * std, x.max()), rel=0.01)
    assert lo == pytest.approx(max(mu - alpha * std, x.min()), rel=0.01)


def test_n_kld_takes_the_widest_of_the_n_best_thresholds():
    x = samples("laplace")
    one = kld_range(stats_of(x), 8)[1]
    ten = calibrate_range(stats_of(x), "10kld", 8)[1]
    assert ten > one and calibrate_range(stats_of(x), "1kld", 8)[1] == one


@pytest.mark.parametrize("p", [99.0, 99.99])
def test_percentile_matches_numpy(p):
    x = samples("gaussian")
    lo, hi = percentile_range(stats_of(x), p)
    width = (x.max() - x.min()) / BINS
    assert hi == pytest.approx(np.percentile(x, p), abs=width)
    assert lo == pytest.approx(np.percentile(x, 100 - p), abs=width)
    assert not math.isclose(hi, x.max())


def test_in_ir_takes_the_irs_range_where_it_states_one(tmp_path):
    """in_ir: an activation's range is the IR's layer_top_range (read onto the tensor as
    ir_range), else its extrema, as the tool chain's in_ir does."""
    from npuopt.ir import read_graph, write_graph
    from test_quantize_ops import batches, one_layer, quantize
    graph = one_layer("Activation", [(6,)], dict(method="RELU"))
    path = tmp_path / "f.txt"
    write_graph(graph, str(path))
    top = "layer_top_type=[float32]\n"
    path.write_text(path.read_text().replace(top, top + "layer_top_range=[[-1.0,3.0]]\n", 1))
    stated = read_graph(str(path))
    assert stated.input_tensors[0].ir_range == (-1.0, 3.0)
    qg = quantize(stated, batches((6,), lo=-0.5, hi=0.5), calibration_strategy_for_activation="in_ir",
                  quantize_method_for_activation="per_tensor_asymmetric")
    assert float(qg.input_tensors[0].scale) == pytest.approx(255 / 4.0, rel=1e-3)
    plain = quantize(one_layer("Activation", [(6,)], dict(method="RELU")), batches((6,), lo=-0.5, hi=0.5),
                     calibration_strategy_for_activation="in_ir",
                     quantize_method_for_activation="per_tensor_asymmetric")
    assert float(plain.input_tensors[0].scale) > 200     # the extrema (about 1 wide)


def test_weighted_scale_param_weights_the_two_sides_scales():
    """weighted_scale_param[a,b,c,d] with given params, the tool chain's form: the scale is
    alpha * (255 / max) + (1 - alpha) * (255 / |min|) of the running extremes, alpha = a
    where the positive side is larger, else b or c by the standard deviation against d."""
    x = np.concatenate([samples("gaussian") * 0.5, [3.0, -1.0]])
    stats = stats_of(x)
    lo, hi = calibrate_range(stats, "weighted_scale_param[0.25,0.5,0.75,0.01]", 8)
    pos, neg = float(stats.running_max), -float(stats.running_min)
    assert pos > neg
    scale = 0.25 * 255 / pos + 0.75 * 255 / neg
    assert hi == pytest.approx(255 / scale) and lo == -hi
    lo, hi = calibrate_range(stats_of(-x), "weighted_scale_param[0.25,0.5,0.75,0.01]", 8)   # std 0.5 > 0.01: b
    assert hi == pytest.approx(255 / (0.5 * 255 / neg + 0.5 * 255 / pos))


def test_weighted_scale_params_automatic_form_takes_the_alpha_that_loses_least():
    """weighted_scale_param with a > 1 (the tool chain's automatic form): npuopt searches
    alpha in [0, 1] per tensor for the grid of least error over the histogram. Against a
    brute-force NumPy reference of the same search, on a skewed sample (the range lies
    between its two sides' extents)."""
    x = np.concatenate([samples("gaussian") * 0.5, [4.0, -1.5]])
    stats = stats_of(x)
    lo, hi = calibrate_range(stats, "weighted_scale_param[2,0.2,0.3,0.4]", 8)
    pos, neg = float(stats.running_max), -float(stats.running_min)
    centres, hist = stats.bin_centres().numpy(), stats.hist.numpy()
    best = None
    for alpha in np.linspace(0, 1, 101):
        extent = 255 / (alpha * 255 / pos + (1 - alpha) * 255 / neg)
        step = 2 * extent / 255
        xq = np.floor((np.clip(centres, -extent, extent) + extent) / step + 0.5) * step - extent
        err = float((((xq - centres) ** 2) * hist).sum())
        if best is None or err < best[0]:
            best = (err, extent)
    assert hi == pytest.approx(best[1]) and lo == -hi
    assert min(neg, pos) <= hi <= max(neg, pos)


@pytest.mark.parametrize("magnitude", [1e-8, 1.0])
def test_weighted_scale_params_automatic_form_scales_with_the_tensor(magnitude):
    """The automatic form's range follows the tensor's magnitude below float32's eps too
    (the tool chain's zero band took such a side for empty: scale 1, all values rounded to
    zero on the parser's mobilenet_v2), and a side with no values has no say in it."""
    x = samples("gaussian") * 0.5
    lo, hi = calibrate_range(stats_of(x * magnitude), "weighted_scale_param[2,0.2,0.3,0.4]", 8)
    ref_lo, ref_hi = calibrate_range(stats_of(x), "weighted_scale_param[2,0.2,0.3,0.4]", 8)
    assert hi == pytest.approx(ref_hi * magnitude, rel=1e-4) and lo == pytest.approx(ref_lo * magnitude, rel=1e-4)
    lo, hi = calibrate_range(stats_of(np.abs(x) * magnitude), "weighted_scale_param[2,0.2,0.3,0.4]", 8)
    assert lo == 0.0 and 0.5 * magnitude < hi <= float(np.abs(x).max()) * magnitude * (1 + 1e-6)
