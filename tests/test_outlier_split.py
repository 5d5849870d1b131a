"""split_outlier_channels (issue 44): a SiLU-gated MLP whose product has two channels far
above the rest gets layers of their own for them. The float function stays, the
split layers are where they should be, the quantized (W8A8) output's error falls
against no split, a layer without outliers is left alone, the count of outliers is
the one of least rounding noise, and the tool chain's reader computes the split IR as
npuopt does (also the outliers' FullyConnected, which has no biases of its own: with
asymmetric activations the input zero point's fold gives it some)."""
import numpy as np
import pytest
import torch

from npuopt.errors import ConfigError
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.global_calibration.outlier_split import outlier_count

from conftest import npuopt_run_outputs, output_mse
from test_smooth_quant import run as smooth_quant_run

TOKENS, CHANNELS, HIDDEN = 16, 32, 48
OUTLIERS = [5, 20]


def mlp(path, scale: float = 150.0):
    """x [1, 16, 32] -> down(silu(gate(x)) * up(x)), up's rows 5 and 20 reading x's
    channel 0 only, times `scale`; x's channel 0 is 0 but at the first token (a decoder's
    "massive activations": a few channels at one token)."""
    gen = torch.Generator().manual_seed(0)
    up = torch.randn(HIDDEN, CHANNELS, generator=gen) * 0.2
    up[:, 0] = 0
    up[OUTLIERS] = 0
    up[OUTLIERS, 0] = scale * 0.2
    b = GraphBuilder("mlp")
    b.input("x", [1, TOKENS, CHANNELS])
    b.layer("FullyConnected", "gate", ["x"], dict(num_output=HIDDEN, with_activation="NONE"),
            {"weights": torch.randn(HIDDEN, CHANNELS, generator=gen) * 0.2, "biases": torch.zeros(HIDDEN)})
    b.layer("Activation", "silu", ["gate"], dict(method="SWISH"))
    b.layer("FullyConnected", "up", ["x"], dict(num_output=HIDDEN, with_activation="NONE"),
            {"weights": up, "biases": torch.randn(HIDDEN, generator=gen) * 0.1})
    b.layer("Eltwise", "mul", ["silu", "up"], dict(method="MUL", with_activation="NONE"))
    b.layer("FullyConnected", "down", ["mul"], dict(num_output=CHANNELS, with_activation="NONE"),
            {"weights": torch.randn(CHANNELS, HIDDEN, generator=gen) * 0.2,
             "biases": torch.randn(CHANNELS, generator=gen) * 0.1})
    write_graph(b.build(["down"]), str(path / "mlp.txt"))
    x = torch.randn(32, TOKENS, CHANNELS, generator=gen)
    x[:, :, 0] = 0
    x[:, 0, 0] = 3
    np.save(path / "data.npy", x.numpy())


def run(path, method, **fields):
    return smooth_quant_run(path, method, "mlp", **{
        "trigger_float_op": "Eltwise",  # as on a decoder's residual Adds (the down projection's output stays wide)
        "calibration_strategy_for_activation": "extrema",  # the first token's outliers are the calibration's largest
        **fields})


def test_outliers_get_layers_of_their_own_and_the_error_falls(tmp_path):
    mlp(tmp_path)
    x = torch.from_numpy(np.load(tmp_path / "data.npy"))
    unsplit, _ = output_mse(run(tmp_path, "none"), tmp_path / "mlp.txt", x)
    master = run(tmp_path, "split_outlier_channels")
    error, want = output_mse(master, tmp_path / "mlp.txt", x)
    g = master.graph
    assert g.node("up_outliers").get_constant("weights").betensor.shape == (2, CHANNELS)
    assert g.node("up").get_constant("weights").betensor.shape == (HIDDEN - 2, CHANNELS)
    assert g.node("down_outliers").get_constant("weights").betensor.shape == (CHANNELS, 2)
    assert "biases" not in g.node("down_outliers").constants  # down's biases are added once
    assert [n.name for n in g.nodes] == ["x", "gate", "silu", "up", "mul", "down", "gate_outliers", "silu_outliers",
                                         "up_outliers", "mul_outliers", "down_outliers", "down_outliers_add"]
    assert g.node("down_outliers_add").outputs[0].name == "down"  # the readers' tensor, as before
    assert torch.allclose(g.forward([x])[0], want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    bits = {name: st.activation_bits for name, st in master.plan.settings.items()}
    assert {n: bits[n] for n in ("up", "down", "up_outliers", "down_outliers", "down_outliers_add")} == \
        {"up": 8, "down": 8, "up_outliers": 16, "down_outliers": 16, "down_outliers_add": 8}  # outlier_bits (16)
    assert master.qgraph.node("down_outliers").inputs[0].dtype.name == "INT16"
    assert error < 0.2 * unsplit, (error, unsplit)  # measured: 0.0047 against 0.256


def test_an_input_without_outliers_is_left_alone(tmp_path, caplog):
    mlp(tmp_path, scale=1.0)
    with caplog.at_level("INFO", logger="npuopt"):
        master = run(tmp_path, "split_outlier_channels")
    assert [n.name for n in master.graph.nodes] == ["x", "gate", "silu", "up", "mul", "down"]
    assert "split_outlier_channels: 0 of 1 layers' inputs split" in caplog.text


def test_the_count_is_the_one_of_least_rounding_noise():
    # noise of k outliers: m_1^2 k + m_(k+1)^2 (C - k)
    maxima = torch.tensor([1.0] * 100 + [3000.0, 1300.0])
    assert outlier_count(maxima, 16, 32) == 2  # 2 * 3000^2 + 98: the least, and far below 102 * 3000^2
    assert outlier_count(maxima, 4, 1) == 1  # at most max_channels: 3000^2 + 101 * 1300^2, 5.1 times less
    assert outlier_count(maxima, 16, 1) == 0  # which is not 16 times less
    assert outlier_count(torch.tensor([1.0] * 100 + [3.0]), 16, 32) == 0  # 9 + 100 against 909: too little gain
    assert outlier_count(torch.tensor([2.0]), 16, 32) == 0


def test_bad_params_stop_with_one_line(tmp_path):
    mlp(tmp_path)
    with pytest.raises(ConfigError, match="min_gain"):
        run(tmp_path, "split_outlier_channels[0.5]")


def asymmetric(path):
    """The split MLP quantized with asymmetric activations: (OptMaster, quantized IR path)."""
    mlp(path)
    master = run(path, "split_outlier_channels[16, 32, 0]", quantize_method_for_activation="per_tensor_asymmetric")
    return master, path / "out_split_outlier_channels" / "mlp_o.txt"


def test_a_layer_without_biases_carries_its_input_zero_point_in_biases(tmp_path):
    """The outliers' FullyConnected has no biases in the float graph; with an asymmetric
    input its zero point's fold needs some (before: the output was off by zp * sum(q_w))."""
    master, quantized = asymmetric(tmp_path)
    q = read_graph(str(quantized))
    assert "biases" in q.node("down_outliers").constants and int(q.node("down_outliers").inputs[0].zerop) != 0
    error, want = output_mse(master, tmp_path / "mlp.txt", torch.from_numpy(np.load(tmp_path / "data.npy")))
    assert error < 1e-3 * float(want.var()), (error, float(want.var()))


@pytest.mark.shared
def test_the_tool_chain_reads_the_split_ir_as_npuopt_computes_it(tmp_path, oracle):
    """OPT's reader and npuopt-run compute npuopt's integers on the split IR (asymmetric
    activations) within 1 LSB."""
    from opt_oracle import OptJob
    _, quantized = asymmetric(tmp_path)
    x = np.load(tmp_path / "data.npy")[:1]
    ours = read_graph(str(quantized)).forward([torch.from_numpy(x)])[0].numpy()
    assert np.abs(npuopt_run_outputs(quantized, x, tmp_path)["down"].astype(np.int64) - ours).max() <= 1
    np.save(tmp_path / "x.npy", x)
    opt = oracle.forward([OptJob(quantized, quantized.with_suffix(".bin"), [tmp_path / "x.npy"],
                                 tmp_path / "opt.npz")])[0]
    assert not opt.errors, opt.errors
    assert np.abs(opt.outputs[0].astype(np.int64) - ours).max() <= 1
