"""Issue 26: quantization-aware fine-tuning of the IR through its exact grids
(npuopt/quant/trainable.py, npuopt/fine_tuning.py): the training forward is the
quantized forward, its gradients are the float layers' at the quantized point, the IR
written computes what the last training forward computed, fine-tuning lowers the
error, and the cfg's fields and Train plugins work as the Compass Optimizer's QAT
names them."""
import inspect

import numpy as np
import pytest
import torch

from conftest import npuopt_run_outputs
from npuopt.config import load_config
from npuopt.errors import ConfigError, PluginError
from npuopt.fine_tuning import RANGE_RATE, adam, held_out_split
from npuopt.ir import read_graph
from npuopt.optmaster import OptMaster
from npuopt.quant.compare import dequantized
from npuopt.quant.trainable import TrainableGraph
from npuopt.registry import PLUGINS, PluginType, register_plugin
from test_opt_cfg import EXAMPLE, tiny

SETTINGS = {
    "8-bit asymmetric": dict(quantize_method_for_activation="per_tensor_asymmetric"),
    "4-bit per-channel": dict(weight_bits=4, quantize_method_for_weight="per_channel_asymmetric",
                              quantize_method_for_activation="per_tensor_asymmetric"),
    "16-bit, 48-bit biases": dict(weight_bits=16, activation_bits=16, bias_bits=48, lut_items_in_bits=10),
    "weight-only, per block": dict(weight_bits=4, trigger_float_op="float16_act_int_wht",
                                   quantize_method_for_weight="per_block_asymmetric", weight_block_size=8),
    "fp8": dict(quant_type="wfp8afp8"),
}


def calibrated(tmp_path, **fields):
    """An OptMaster of tiny_cnn, calibrated and planned, not quantized yet."""
    master = OptMaster(tiny(tmp_path, **{"global_calibration": "none", **fields}))
    master.load()
    master.check_data()
    for stage in (master.stage1_passes, master.plan_settings, master.before_calibration, master.calibrate,
                  master.after_calibration):
        stage()
    return master


def samples(n=16, start=0):
    return torch.from_numpy(np.load(EXAMPLE / "data.npy")[start:start + n])


def train_steps(model, x, steps=3, lr=0.3):
    """A few Adam steps on the outputs' squares: anything that moves the weights."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        sum(o.pow(2).mean() for o in model.outputs(x)).backward()
        optimizer.step()


@pytest.mark.parametrize("learn_ranges", [False, True], ids=["frozen", "learned ranges"])
@pytest.mark.parametrize("name", SETTINGS)
def test_the_training_forward_is_the_quantized_forward_and_the_ir_written_computes_it(tmp_path, name, learn_ranges):
    """After training steps, the training forward's outputs equal the plan's quantized
    forward exactly, and the IR written from the plan afterwards (read back, and run by
    npuopt-run) computes them too: no gap between training and deployment."""
    master = calibrated(tmp_path, **SETTINGS[name])
    model = TrainableGraph(master.plan, learn_ranges=learn_ranges)
    x = samples()
    before = {n: layer.units.detach().clone() for n, layer in model.by_name.items()}
    train_steps(model, x)
    with torch.no_grad():
        last = [o.clone() for o in model.outputs(x)]
    assert any(not torch.equal(before[n], layer.units.detach()) for n, layer in model.by_name.items())
    assert not learn_ranges or any(bool(layer.log_range.detach().abs().max() > 0) for layer in model.by_name.values())
    realised = master.plan.realised()
    want = [dequantized(t, v) for t, v in zip(realised.output_tensors, realised.forward([x]))]
    assert all(torch.equal(a, b) for a, b in zip(last, want))
    model.finish()
    with master.outputs:  # the files are put in place when it closes
        master.quantize()
    written = read_graph(str(tmp_path / "out" / "tiny_cnn_o.txt"))
    raw = written.forward([x])
    got = [dequantized(t, v) for t, v in zip(written.output_tensors, raw)]
    assert all(torch.equal(a, b) for a, b in zip(last, got))
    ran = npuopt_run_outputs(tmp_path / "out" / "tiny_cnn_o.txt", x.numpy(), tmp_path)  # written independently
    assert np.array_equal(ran[written.output_tensors[0].name], raw[0].numpy())


def test_the_compass_optimizers_reader_computes_a_fine_tuned_ir_as_npuopt_does(tmp_path, oracle):
    """OPT's OptForward reads every layer of a fine-tuned 4-bit IR (a convolution, a
    sigmoid's lookup table, a softmax) as quantized and agrees with npuopt on its output
    within 1 LSB (the conformance suite's comparison)."""
    from conftest import write_cfg, write_tiny_ir
    from opt_oracle import OptJob
    from test_conformance import compare_with_opt
    data = np.random.default_rng(0).standard_normal((33, 6, 6, 2)).astype(np.float32)
    np.save(tmp_path / "data.npy", data[:32])
    np.save(tmp_path / "x.npy", data[32:])
    cfg = write_cfg(tmp_path / "opt.cfg", graph=write_tiny_ir(tmp_path / "ir"), output_dir=tmp_path / "out",
                    dataset="NumpyDataset", calibration_data=tmp_path / "data.npy", train_data=tmp_path / "data.npy",
                    weight_bits=4, quantize_method_for_weight="per_channel_asymmetric", train_epochs=2, device="cpu")
    report = OptMaster(load_config(str(cfg))).run()
    assert report["fine_tuning"]["layers"] == 1
    txt = tmp_path / "out" / "tiny_o.txt"
    written = read_graph(str(txt))
    outputs = [o.numpy() for o in written.forward([torch.from_numpy(data[32:])], keep_tensors=True)]
    opt = oracle.forward([OptJob(txt, txt.with_suffix(".bin"), [tmp_path / "x.npy"], tmp_path / "opt.npz")])[0]
    share, problems = compare_with_opt(written, outputs, opt)
    assert not problems, problems
    assert share >= 0.99


def test_gradients_are_the_float_graphs_at_the_quantized_weights(tmp_path):
    """Weight-only float32 layers compute the float graph with their weights on the grid:
    the gradient of each layer's weight units is the float graph's weight gradient there,
    divided by the grid's scale (the straight-through rounding; none to a weight beyond the
    grid's ends), computed by plain autograd."""
    master = calibrated(tmp_path, weight_bits=4, trigger_float_op="float32_act_int_wht",
                        quantize_method_for_weight="per_channel_asymmetric")
    model = TrainableGraph(master.plan)
    x = samples(8)
    sum(o.pow(2).sum() for o in model.outputs(x)).backward()
    graph = read_graph(str(EXAMPLE / "tiny_cnn.txt"), str(EXAMPLE / "tiny_cnn.bin"))
    leaves = {}
    for name, layer in model.by_name.items():
        c = graph.node(name).constants["weights"]
        q = layer.grid.to_grid(layer.units.detach().clone())
        c.betensor = ((q + layer.zp) / layer.scale).requires_grad_(True)
        leaves[name] = c.betensor
    for t in graph.input_tensors:
        t.betensor = x
    with torch.enable_grad():
        for node in graph.nodes:
            node.forward()
        sum(t.betensor.pow(2).sum() for t in graph.output_tensors).backward()
    for name, layer in model.by_name.items():
        u = layer.units.detach()
        clamped = (u - layer.grid.to_grid(u.clone())).abs() > 0.5  # beyond the grid's ends: no gradient
        want = torch.where(clamped, 0.0, leaves[name].grad / layer.scale)
        assert torch.allclose(layer.units.grad, want, rtol=1e-3, atol=1e-4 * float(want.abs().max())), name


def test_fine_tuning_lowers_the_output_error_below_post_training(tmp_path):
    """tiny_cnn with 4-bit weights, trained on its 100 samples without labels: the
    quantized output's error against float on them falls below post-training's, and the
    report says what was learned."""
    fields = dict(weight_bits=4, quantize_method_for_weight="per_channel_asymmetric", metric="", data="",
                  label="")
    x = samples(100)
    errors = {}
    for run, extra in (("ptq", {}), ("qat", {"train_data": EXAMPLE / "data.npy", "train_epochs": 4,
                                              "train_holdout": 0.2})):
        (tmp_path / run).mkdir()
        master = OptMaster(tiny(tmp_path / run, **fields, **extra))
        report = master.run()
        graph = read_graph(str(tmp_path / run / "out" / "tiny_cnn_o.txt"))
        got = dequantized(graph.output_tensors[0], graph.forward([x])[0])
        want = read_graph(str(EXAMPLE / "tiny_cnn.txt")).forward([x])[0]
        errors[run] = float(((got - want) ** 2).sum() / (want ** 2).sum())
    assert errors["qat"] < 0.7 * errors["ptq"], errors
    tuned = report["fine_tuning"]
    assert tuned["samples"] == 100 and tuned["layers"] == 6 and tuned["epochs"] == 4
    assert tuned["loss_last_epoch"] < tuned["loss_first_epoch"]
    errors = tuned["held_out_errors"]  # 20 samples held out: before training, after each epoch
    assert tuned["held_out"] == 20 and len(errors) == 5 and tuned["kept_epoch"] >= 1
    assert errors[tuned["kept_epoch"]] == min(errors)


def test_learned_ranges_move_at_a_share_of_the_learning_rate(tmp_path):
    """Adam moves each parameter by about its rate a step: the weights' log-ranges get
    RANGE_RATE of it (at the weights' rate they threw Lite0's held-out error from 0.087 to
    0.29 in an epoch), the weights and biases all of it; one step moves a range by that."""
    master = calibrated(tmp_path, **SETTINGS["8-bit asymmetric"])
    model = TrainableGraph(master.plan, learn_ranges=True)
    optimizer = adam(model, 0.01)
    assert [g["lr"] for g in optimizer.param_groups] == [0.01, 0.01 * RANGE_RATE] and RANGE_RATE < 0.1
    ranges = {id(layer.log_range) for layer in model.by_name.values()}
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == ranges
    assert not ranges & {id(p) for p in optimizer.param_groups[0]["params"]}
    optimizer.zero_grad()
    sum(o.pow(2).mean() for o in model.outputs(samples())).backward()
    optimizer.step()
    moved = max(float(layer.log_range.detach().abs().max()) for layer in model.by_name.values())
    assert 0 < moved <= 0.01 * RANGE_RATE * 1.01
    assert [g["lr"] for g in adam(TrainableGraph(master.plan), 0.01).param_groups] == [0.01]


def test_held_out_samples_are_a_fixed_share_apart_from_training():
    train, held = held_out_split(200, 0.1)
    assert len(held) == 20 and sorted(train + held) == list(range(200))
    assert (train, held) == held_out_split(200, 0.1) and held != list(range(180, 200))
    assert held_out_split(150, 0.1) == (list(range(150)), [])  # under MIN_HELD_OUT (16): none held out
    assert held_out_split(200, 0.0)[1] == []


def test_fine_tuning_starts_from_the_roundings_of_less_held_out_error(tmp_path):
    """With the default global calibration (GPTQ), the start's roundings are fitted again
    on the training samples, by GPTQ and by AdaRound, and the one of less held-out error
    taken: at learning rate 0 the IR is, byte for byte, the post-training one of the
    method chosen with the training samples as calibration data, and not the other's."""
    from test_global_calibration import run, small_model
    small_model(tmp_path)  # logits out (tiny_cnn's softmax hides the difference), 64 samples
    data = np.load(tmp_path / "data.npy")
    train, held = held_out_split(len(data), 0.25)
    np.save(tmp_path / "train.npy", data[train])  # (statistics from the same samples in both runs)
    qat = run(tmp_path, "auto", calibration_data="train.npy", train_data="data.npy", train_epochs="1",
              train_learning_rate="0", train_holdout="0.25", output_dir="out_qat")
    start = qat.report["fine_tuning"]["start"]
    errors = start["held_out_errors"]
    assert set(errors) == {"gptq_zy", "adaround"} and start["chosen"] == min(errors, key=errors.get)
    assert errors["gptq_zy"] != errors["adaround"]
    for name, method in (("gptq_zy", "auto"), ("adaround", "adaround")):
        run(tmp_path, method, calibration_data="train.npy", output_dir=f"out_{name}")
        same = (tmp_path / f"out_{name}" / "small_o.bin").read_bytes() == \
            (tmp_path / "out_qat" / "small_o.bin").read_bytes()
        assert same == (name == start["chosen"]), name


def test_the_start_is_fitted_on_the_training_samples_alone(tmp_path, monkeypatch):
    """choose_start's methods read train_data's training samples, in order, in batches of
    calibration_batch_size: none of the held-out ones, none of calibration_data's."""
    import npuopt.fine_tuning as ft
    from test_global_calibration import run, small_model
    small_model(tmp_path)
    seen = []

    def recording(method):
        def recorded(ctx, params):
            seen.append(ctx.shard().units)
            return method(ctx, params)
        return recorded
    monkeypatch.setattr(ft, "auto", recording(ft.auto))
    monkeypatch.setattr(ft, "adaround", recording(ft.adaround))
    run(tmp_path, "auto", train_data="data.npy", train_epochs="1", train_learning_rate="0", train_holdout="0.25",
        output_dir="out_qat")
    train, _ = held_out_split(64, 0.25)
    assert seen == 2 * [[train[i:i + 16] for i in range(0, len(train), 16)]]


def test_fine_tuning_that_only_raises_the_held_out_error_keeps_the_start(tmp_path):
    """A learning rate far too high: every epoch's held-out error is above the start's, so
    the start is kept and the IR is post-training's, byte for byte."""
    fields = dict(weight_bits=4, quantize_method_for_weight="per_channel_asymmetric", global_calibration="none")
    for run, extra in (("ptq", {}), ("qat", {"train_data": EXAMPLE / "data.npy", "train_epochs": 2,
                                              "train_learning_rate": 50, "train_holdout": 0.2})):
        (tmp_path / run).mkdir()
        report = OptMaster(tiny(tmp_path / run, **fields, **extra)).run()
    errors = report["fine_tuning"]["held_out_errors"]
    assert report["fine_tuning"]["kept_epoch"] == 0 and min(errors[1:]) > errors[0]
    for suffix in ("_o.txt", "_o.bin"):
        assert (tmp_path / "qat" / "out" / f"tiny_cnn{suffix}").read_bytes() == \
            (tmp_path / "ptq" / "out" / f"tiny_cnn{suffix}").read_bytes()


class LabelLoop:
    """A user's QAT training loop as the Compass Optimizer calls one: cross-entropy on the labels."""
    seen = []

    def __init__(self, epochs="2"):
        self.epochs = int(epochs)

    def __call__(self, model, train_dataloader, device=None, **more):  # OPT passes more by name
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(self.epochs):
            for data, labels in train_dataloader:
                optimizer.zero_grad()
                prob = model(data.to(device))
                loss = torch.nn.functional.nll_loss(prob.clamp_min(1e-6).log(), labels.long().reshape(-1))
                loss.backward()
                optimizer.step()
                LabelLoop.seen.append(loss.item())


class BrokenLoop:
    def __call__(self, model, train_dataloader, **kwargs):
        raise RuntimeError("my loop broke")


@pytest.fixture
def train_plugins():
    for cls in (LabelLoop, BrokenLoop):
        register_plugin(PluginType.Train, "1.0")(cls)
    yield
    PLUGINS[PluginType.Train].remove_source(inspect.getsourcefile(LabelLoop))


@pytest.mark.usefixtures("train_plugins")
def test_a_train_plugin_trains_the_model_with_labels(tmp_path):
    LabelLoop.seen.clear()
    for run in ("ptq", "qat"):
        (tmp_path / run).mkdir()
    ptq = OptMaster(tiny(tmp_path / "ptq", global_calibration="none", weight_bits=4)).run()
    report = OptMaster(tiny(tmp_path / "qat", global_calibration="none", weight_bits=4,
                            train_data=EXAMPLE / "data.npy", train_label=EXAMPLE / "labels.npy",
                            train="LabelLoop(3)", train_batch_size=25)).run()
    assert len(LabelLoop.seen) == 3 * 4
    assert report["fine_tuning"]["train"] == "LabelLoop(3)"
    assert (tmp_path / "qat" / "out" / "tiny_cnn_o.bin").read_bytes() != \
        (tmp_path / "ptq" / "out" / "tiny_cnn_o.bin").read_bytes()
    assert ptq["metrics"]["float"] == report["metrics"]["float"]  # the float model stays the reference


@pytest.mark.usefixtures("train_plugins")
def test_bad_training_settings_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="'train'.*train_data"):
        OptMaster(tiny(tmp_path, train="LabelLoop")).run()
    with pytest.raises(PluginError, match="Train plugin 'NoSuchLoop' not found"):
        OptMaster(tiny(tmp_path, train_data=EXAMPLE / "data.npy", train="NoSuchLoop")).run()
    with pytest.raises(PluginError, match="BrokenLoop.*my loop broke"):
        OptMaster(tiny(tmp_path, global_calibration="none", train_data=EXAMPLE / "data.npy",
                       train="BrokenLoop")).run()
    assert not (tmp_path / "out" / "tiny_cnn_o.txt").exists()
    with pytest.raises(ConfigError, match="train_epochs"):
        tiny(tmp_path, train_epochs=0)


@pytest.mark.slow
def test_fine_tuning_an_ir_the_parser_wrote_lowers_its_error(tmp_path):
    """Acceptance 3: the parser's mobilenet_v2 (batch 1 in its shapes: samples run one at a
    time) with 4-bit weights, fine-tuned on 64 unlabeled calibration images: its output
    error against float on 16 `val` images falls below post-training's."""
    from conftest import SHARED_DATA, run_cfg
    folder, images = SHARED_DATA / "parser_irs" / "mobilenet_v2", SHARED_DATA / "imagenet_sample" / "labels.tsv"
    if not folder.is_dir() or not images.is_file():
        pytest.skip("needs ../shared/data/parser_irs/mobilenet_v2 and ../shared/data/imagenet_sample")
    fields = dict(graph=folder / "mobilenet_v2.txt", model_name="mnv2", dataset="ImageFolderDataset",
                  image_layout="NCHW", calibration_data=f"{images}:calib:32", calibration_batch_size=16,
                  weight_bits=4, quantize_method_for_weight="per_channel_asymmetric", device="cpu")
    errors = {}
    qat = {"train_data": f"{images}:calib:64", "train_epochs": 8}
    for run, extra in (("ptq", {}), ("qat", qat)):
        (tmp_path / run).mkdir()
        run_cfg(tmp_path / run / "opt.cfg", output_dir=tmp_path / run / "out", **fields, **extra)
        errors[run] = relative_output_error(folder / "mobilenet_v2.txt", tmp_path / run / "out" / "mnv2_o.txt",
                                            f"{images}:val:16")
    assert errors["qat"] < errors["ptq"], errors


def relative_output_error(float_ir, quantized_ir, data: str) -> float:
    """Squared error of the quantized IR's outputs over the float IR's squares, on `data`
    (read as the last run's cfg says: NCHW)."""
    from npuopt.data import make_dataset
    dataset = make_dataset("ImageFolderDataset", data, field="data")
    float_graph, quantized = read_graph(str(float_ir)), read_graph(str(quantized_ir))
    num = den = 0.0
    for i in range(len(dataset)):
        x = torch.as_tensor(dataset[i][0])[None]
        want = float_graph.forward([x])[0]
        got = dequantized(quantized.output_tensors[0], quantized.forward([x])[0])
        num, den = num + float(((got - want) ** 2).sum()), den + float((want ** 2).sum())
    return num / den
