"""Issue 13: memory follows the model and the batch, not metric_batch_size or the number
of images. The evaluation runs each batch in chunks that fit a working-memory budget
(OptMaster.forward, PyGraph.samples_within); statistics sum in fixed-size slices.
bench/bench_memory.py measures the Lite0 model test's peak.

Issue 23: the float model's weights are held once: the quantized graph holds the float
constants that quantizing does not change (quantizer.kept_tensors), which no quantize
function of npuopt's writes into. bench/bench_memory.py --model vit_b_16 measures ViT-B/16."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import npuopt.feed as feed
from conftest import REPO, npuopt_env, write_cfg
from npuopt.config import load_config
import npuopt.graph as graph_mod
from npuopt.errors import GraphError
from npuopt.graph import WORKING_COPIES
from npuopt.ir import write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins
from npuopt.quant import plan as plan_mod
from npuopt.quant.quantizer import build_quantized_graph, float_layers
from npuopt.quant.settings import QuantSettings
from npuopt.quant.statistics import SUM_SLICE, Statistics
from npuopt.quant.tensors import Unsupported
from npuopt.registry import OP_QUANTIZERS, OpType, quant_register
from test_mixed_precision import model
from test_pipeline import run

OP_TESTS = REPO / "op_tests"


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



@pytest.mark.parametrize("zerop", ["number", "per_channel", "per_block"])
def test_integer_weight_sums_made_by_channels_as_over_the_whole(zerop, monkeypatch):
    """A layer's sums of q_w + zp_w (its biases' zero-point fold) made a few channels at a
    time equal those of the whole tensor's q_w + zp_w (shifted, as the forward reads it)."""
    from npuopt.dtype import Dtype
    from npuopt.quant import formats
    from npuopt.quant.tensors import integer_weight_sums, shifted
    from npuopt.tensor import PyTensor
    monkeypatch.setattr(formats, "ELEMENTS_AT_ONCE", 64)  # 2 channels of 40 per part
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-8, 8, (7, 40), generator=g, dtype=torch.int8)
    c = PyTensor("weights", q, Dtype.INT8, (7, 40))
    c.key_axis = 0
    c.zerop = {"number": 3, "per_channel": torch.randint(-8, 8, (7,), generator=g),
               "per_block": torch.randint(-8, 8, (7 * 3,), generator=g)}[zerop]
    if zerop == "per_block":
        c.block_size = 16  # blocks of 16, 16 and 8
    expected = shifted(c).reshape(7, -1).sum(dim=1)
    assert torch.equal(integer_weight_sums(c), expected)
    assert expected.abs().sum() > 0

# ---- issue 23: the float model's weights are held once ---------------------------------------
def float_constants(graph) -> dict:
    """(layer, constant) -> (its tensor, the tensor's version counter, a copy of its values)."""
    return {(n.name, k): (c.betensor, c.betensor._version, c.betensor.clone())
            for n in graph.nodes for k, c in n.constants.items()}


def assert_untouched(graph, before: dict) -> None:
    """The float graph's constants hold the tensors they held, neither written into nor changed."""
    for (layer, key), (tensor, version, values) in before.items():
        now = graph.node(layer).constants[key].betensor
        assert now is tensor, (layer, key)
        assert tensor._version == version and torch.equal(tensor, values), (layer, key)


def assert_holds_unchanged_as_shared(qgraph, float_graph) -> int:
    """Each constant of `qgraph` equal to its float one (dtype, shape, values) is that very tensor,
    not a copy; returns how many there are."""
    shared = 0
    for qnode in qgraph.nodes:
        fnode = float_graph.node(qnode.name)
        for key, qc in qnode.constants.items():
            fc = fnode.constants.get(key) if fnode is not None else None
            if fc is None or qc.betensor.dtype != fc.betensor.dtype or qc.betensor.shape != fc.betensor.shape:
                continue
            if torch.equal(qc.betensor, fc.betensor):
                assert qc.betensor is fc.betensor, (qnode.name, key)
                shared += 1
    return shared


def test_quantized_graph_holds_the_float_constants_it_does_not_change():
    g, _ = model()
    before = float_constants(g)
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema", trigger_float_op=n.name == "fc3")
                for n in g.nodes}
    qg, kept = build_quantized_graph(g, dict(settings), float_layers(g, settings))
    assert kept == {"fc2", "fc3"}  # fc3 asked for; fc2 (fused TANH) found Unsupported while quantizing
    assert_untouched(g, before)
    for layer in ("fc2", "fc3"):
        for key, c in qg.node(layer).constants.items():
            assert c.betensor is g.node(layer).constants[key].betensor
    for layer in ("fc1", "fc4"):
        assert qg.node(layer).constants["weights"].betensor.dtype == torch.int8
    assert assert_holds_unchanged_as_shared(qg, g) == 4


def test_a_plugin_quantize_function_writes_into_copies():
    """A user's quantize function may write into its layer's constants: those are copied."""
    def writes_then_gives_up(self, *args):
        self.constants["weights"].betensor.mul_(0.5)
        raise Unsupported(f"layer '{self.name}': this plugin gives up")

    quant_register(OpType.FullyConnected, "9.0")(writes_then_gives_up)
    try:
        g, _ = model()
        before = float_constants(g)
        settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema") for n in g.nodes}
        qg, kept = build_quantized_graph(g, dict(settings), float_layers(g, settings))
    finally:
        OP_QUANTIZERS.remove_source(__file__)
    assert kept == {"fc1", "fc2", "fc3", "fc4"}
    assert_untouched(g, before)


OP_TEST_SETTINGS = [{}, {"weight_bits": "4", "quantize_method_for_weight": "per_channel_asymmetric",
                         "quantize_method_for_activation": "per_tensor_asymmetric", "activation_bits": "16"}]


@pytest.mark.parametrize("overrides", OP_TEST_SETTINGS, ids=["as_written", "w4_asym_act16"])
def test_no_quantize_function_writes_into_the_float_constants(overrides, tmp_path, monkeypatch):
    """Every op test through the pipeline: each quantized graph built or quantized again (global
    calibration's realised plan too) leaves the float graph's constants as they were and holds
    those it did not change themselves."""
    counts = {"builds": 0, "shared": 0}
    real_build, real_requantize = plan_mod.build_quantized_graph, plan_mod.requantize

    def checked(float_graph, qgraph_of, call):
        before = float_constants(float_graph)
        out = call()
        assert_untouched(float_graph, before)
        counts["builds"] += 1
        counts["shared"] += assert_holds_unchanged_as_shared(qgraph_of(out), float_graph)
        return out

    monkeypatch.setattr(plan_mod, "build_quantized_graph", lambda float_graph, *rest: checked(
        float_graph, lambda out: out[0], lambda: real_build(float_graph, *rest)))
    monkeypatch.setattr(plan_mod, "requantize", lambda qgraph, float_graph, *rest: checked(
        float_graph, lambda _: qgraph, lambda: real_requantize(qgraph, float_graph, *rest)))
    load_plugins()
    cfgs = sorted(OP_TESTS.glob("*/opt.cfg"))
    assert len(cfgs) > 100
    for cfg in cfgs:
        OptMaster(load_config(str(cfg), {"output_dir": str(tmp_path), **overrides})).run()
    assert counts["builds"] >= len(cfgs) and counts["shared"] > 0


def fc_chain(folder: Path, layers: int) -> Path:
    """A float IR of `layers` FullyConnected layers, 1024 -> 2048 -> 1024 ... features (8 MB
    of float32 weights each), 2 samples to calibrate on and evaluate, and its cfg."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("fc_chain")
    top = b.input("x", [1, 16, 1024])
    for i in range(layers):
        n, k = (2048, 1024) if i % 2 == 0 else (1024, 2048)
        top = b.layer("FullyConnected", f"fc{i}", [top], {"num_output": n, "with_activation": "NONE"},
                      {"weights": torch.randn(n, k, generator=gen) / k ** 0.5, "biases": torch.zeros(n)})[0]
    folder.mkdir(parents=True)
    write_graph(b.build([top]), str(folder / "fc_chain.txt"))
    np.save(folder / "x.npy", torch.randn(2, 16, 1024, generator=gen).numpy())
    return write_cfg(folder / "opt.cfg", graph=folder / "fc_chain.txt", output_dir=folder / "out",
                     dataset="NumpyDataset", calibration_data=folder / "x.npy", data=folder / "x.npy", device="cpu",
                     quantize_method_for_weight="per_channel_symmetric_restricted_range")


# Runs npuopt and prints the process's own peak resident set (VmHWM) as it exits: ru_maxrss
# of a child counts the parent's resident set at the spawn (Linux keeps the high-water mark
# of the memory exec replaces), and pytest's own is as large as a small run's.
PEAK_OF_RUN = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        print(next(line for line in status if line.startswith("VmHWM:")), file=sys.stderr)
atexit.register(peak)
sys.argv = ["npuopt", "--cfg", sys.argv[1]]
runpy.run_module("npuopt", run_name="__main__", alter_sys=True)
"""


def peak_resident_mb(cfg: Path) -> float:
    """Peak resident set of `npuopt --cfg cfg` run by this checkout in a subprocess."""
    env = {**npuopt_env(), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PEAK_OF_RUN, str(cfg)], cwd=cfg.parent, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stderr.strip().splitlines()[-1].split()[1]) / 1024


def test_a_run_holds_the_float_weights_once(tmp_path):
    """16 more layers (128 MB of float weights) raise a whole run's peak resident memory by
    less than twice their float bytes: the float weights once and their 8-bit integers; not
    a mapping of the .bin beside the constants read out of it, a copy of the float graph's
    weights in the quantized graph, nor float copies of the integers for the forward (before
    issue 23 the run's peak rose by 2.5 to 3.1 times their bytes, now by 1.0 to 1.3)."""
    small, large = (peak_resident_mb(fc_chain(tmp_path / str(n), n)) for n in (2, 18))
    assert large - small < 2 * 16 * 8, (small, large)


def _run_fc_chain(folder: Path, monkeypatch, large: bool, metrics: bool):
    cfg = fc_chain(folder, 2)
    if large:  # the two layers' 16 MB count as a large model's weights
        monkeypatch.setattr(graph_mod, "LARGE_WEIGHTS", 0)
    om = OptMaster(load_config(str(cfg), {} if metrics else {"data": ""}))
    om.run()
    return om, (folder / "out" / "fc_chain_o.bin").read_bytes()


def test_a_large_model_s_float_weights_go_once_its_quantized_graph_is_built(tmp_path, monkeypatch):
    """Without metrics, nothing runs the float graph after the build: a large model's float
    weights are released there (half a decoder's peak), the IR written is the same, and
    running that graph again stops with a clear error; with metrics they stay."""
    _, kept_bin = _run_fc_chain(tmp_path / "kept", monkeypatch, large=False, metrics=False)
    om, released_bin = _run_fc_chain(tmp_path / "released", monkeypatch, large=True, metrics=False)
    assert om.graph.weights_released and released_bin == kept_bin
    assert all(c.betensor.numel() == 0 for n in om.graph.nodes for c in n.constants.values())
    with pytest.raises(GraphError, match="weights were released once it was quantized"):
        om.graph.forward([torch.zeros(1, 16, 1024)])
    om, _ = _run_fc_chain(tmp_path / "metrics", monkeypatch, large=True, metrics=True)
    assert not om.graph.weights_released and om.report["metrics"].get("quant") is not None
