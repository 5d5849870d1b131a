"""Issue 12: mvn_correction (mode 0) on a block whose LayerNorm reads, through a
Reshape, a FullyConnected output that one large token widens: the norm's input gets
the finer grid OPT's formula gives, planned on the FullyConnected's output (the
layer that decides it), the quantized output's error falls, and two norms reading one
input get the same correction, not two on top of each other."""
import math

import numpy as np
import pytest
import torch

from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.compare import dequantized
from npuopt.quant.global_calibration.mvn_correction import corrected_scale

from conftest import run_cfg

TOKENS, CHANNELS = 16, 32
LARGE_TOKEN = 20.0  # token 0 of every sample is this much larger than the rest


def block(path, two_norms: bool = False):
    """x [1, 16, 32] -> FullyConnected 'fc0' -> Reshape -> LayerNorm 'norm' -> Reshape
    -> FullyConnected 'fc1' (and, with `two_norms`, a second LayerNorm 'norm_b' of the
    same Reshape whose output is added to fc1's)."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("block")
    b.input("x", [1, TOKENS, CHANNELS])
    b.layer("FullyConnected", "fc0", ["x"], dict(num_output=CHANNELS),
            {"weights": torch.randn(CHANNELS, CHANNELS, generator=gen) * 0.3, "biases": torch.zeros(CHANNELS)})
    b.layer("Reshape", "tokens", ["fc0"], dict(shape=[1, TOKENS, CHANNELS]))
    norm = {"weights": torch.rand(CHANNELS, generator=gen) * 0.5 + 0.5,
            "biases": torch.randn(CHANNELS, generator=gen) * 0.1}
    b.layer("LayerNorm", "norm", ["tokens"], dict(axis=[2], epsilon=1e-5), norm)
    b.layer("Reshape", "rows", ["norm"], dict(shape=[TOKENS, CHANNELS]))
    b.layer("FullyConnected", "fc1", ["rows"], dict(num_output=CHANNELS),
            {"weights": torch.randn(CHANNELS, CHANNELS, generator=gen) * 0.2, "biases": torch.zeros(CHANNELS)})
    out = "fc1"
    if two_norms:
        b.layer("LayerNorm", "norm_b", ["tokens"], dict(axis=[2], epsilon=1e-5), norm)
        b.layer("Reshape", "rows_b", ["norm_b"], dict(shape=[TOKENS, CHANNELS]))
        b.layer("Eltwise", "sum", ["fc1", "rows_b"], dict(method="ADD", with_activation="NONE"))
        out = "sum"
    write_graph(b.build([out]), str(path / "block.txt"))
    for name in ("calib", "val"):
        x = torch.randn(32, TOKENS, CHANNELS, generator=gen)
        x[:, 0] *= LARGE_TOKEN
        np.save(path / f"{name}.npy", x.numpy())


def run(path, method):
    name = method.split("[")[0]
    return run_cfg(path / f"{name}.cfg", graph="block.txt", model_name="block", output_dir=f"out_{name}",
                   dataset="NumpyDataset", calibration_data="calib.npy", calibration_batch_size="8",
                   global_calibration=method)


def output_error(master, path):
    x = torch.from_numpy(np.load(path / "val.npy"))
    graph = read_graph(str(path / "block.txt"))
    want = torch.cat([graph.forward([x[i:i + 1]])[0] for i in range(len(x))])
    got = torch.cat([dequantized(master.qgraph.output_tensors[0], master.qgraph.forward([x[i:i + 1]])[0])
                     for i in range(len(x))])
    return float(((got - want) ** 2).mean())


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("mvn_correction")
    block(path)
    return path, run(path, "none")


def test_opt_formula():
    """OPT writes s = sqrt(si * so) * max(alpha, sqrt(si / so))."""
    for si, so, alpha in [(1.2, 43.0, 0.5), (35.0, 36.0, 0.5), (4.0, 1.0, 1.0), (2.0, 8.0, 0.5), (3.0, 300.0, 2.0)]:
        assert corrected_scale(si, so, alpha) == pytest.approx(math.sqrt(si * so) * max(alpha, math.sqrt(si / so)))


def test_the_norm_input_gets_the_corrected_grid_and_the_error_falls(model):
    path, nearest = model
    master = run(path, "mvn_correction")
    assert master.report["global_calibration"] == ["mvn_correction"]
    si, so = nearest.qgraph.tensor("fc0").scale, nearest.qgraph.tensor("norm").scale
    assert corrected_scale(si, so, 0.5) > 1.5 * si  # the case the method is for (measured: 1.21 -> 3.62)
    assert master.qgraph.tensor("fc0").scale == pytest.approx(corrected_scale(si, so, 0.5), rel=0.01)
    assert master.graph.tensor("fc0").planned_range is not None  # on the layer that decides the grid ...
    assert master.graph.tensor("tokens").planned_range is None   # ... not on the Reshape that passes it on
    assert master.qgraph.tensor("tokens").scale == master.qgraph.tensor("fc0").scale
    assert master.qgraph.tensor("norm").scale == so
    rows = {r["layer"]: r.get("planned", []) for r in master.report["layers"]}
    assert "range of output 'fc0'" in rows["fc0"], rows["fc0"]
    assert output_error(master, path) < 0.7 * output_error(nearest, path)  # measured 0.022 against 0.041


def test_alpha_zero_changes_nothing(model):
    path, nearest = model
    master = run(path, "mvn_correction[0,0]")
    assert all(t.planned_range is None for n in master.graph.nodes for t in n.outputs)
    assert master.qgraph.tensor("fc0").scale == nearest.qgraph.tensor("fc0").scale


def test_two_norms_of_one_input_correct_it_once(tmp_path):
    block(tmp_path, two_norms=True)
    nearest = run(tmp_path, "none")
    master = run(tmp_path, "mvn_correction")
    si, so = nearest.qgraph.tensor("fc0").scale, nearest.qgraph.tensor("norm").scale
    assert nearest.qgraph.tensor("norm_b").scale == so
    assert master.qgraph.tensor("fc0").scale == pytest.approx(corrected_scale(si, so, 0.5), rel=0.01)
