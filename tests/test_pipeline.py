"""The whole pipeline on examples/tiny_cnn: outputs, overrides, float layers, failures."""
import json
import os

import numpy as np
import pytest
import torch

import npuopt.quant.calibration as calibration_mod
import npuopt.quant.quantizer as quantizer_mod
from npuopt.config import load_config
from npuopt.errors import DatasetError, NpuoptError
from npuopt.ir import read_graph
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins
from npuopt.registry import op_register, register_optype

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "tiny_cnn")


def make_cfg(tmp_path, **fields):
    values = dict(graph=f"{EXAMPLE}/tiny_cnn.txt", bin=f"{EXAMPLE}/tiny_cnn.bin", model_name="tiny_cnn",
                  output_dir=str(tmp_path / "out"), dataset="NumpyDataset",
                  calibration_data=f"{EXAMPLE}/data.npy", calibration_batch_size="16",
                  data=f"{EXAMPLE}/data.npy", label=f"{EXAMPLE}/labels.npy", metric_batch_size="25",
                  metric="TopKMetric,TopKMetric(2)", device="cpu",
                  quantize_method_for_weight="per_channel_symmetric_restricted_range",
                  quantize_method_for_activation="per_tensor_asymmetric")
    values.update(fields)
    path = tmp_path / "opt.cfg"
    path.write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    load_plugins()
    return load_config(str(path))


def run(tmp_path, **fields):
    master = OptMaster(make_cfg(tmp_path, **fields))
    return master, master.run()


@pytest.fixture
def warnings(monkeypatch):
    seen = []
    for module in (quantizer_mod, calibration_mod):
        monkeypatch.setattr(module, "OPT_WARN", lambda msg, *a: seen.append(msg))
    import npuopt.optmaster as om
    monkeypatch.setattr(om, "OPT_WARN", lambda msg, *a: seen.append(msg))
    return seen


def test_end_to_end(tmp_path):
    master, report = run(tmp_path)
    out = tmp_path / "out"
    assert (out / "tiny_cnn_o.txt").is_file() and (out / "tiny_cnn_o.bin").is_file()
    saved = json.loads((out / "tiny_cnn_report.json").read_text())
    for kind in ("float", "quant"):
        assert set(saved["metrics"][kind]) == {"TopKMetric", "TopKMetric(2)"}
    assert saved["metrics"]["quant"]["TopKMetric"] >= saved["metrics"]["float"]["TopKMetric"] - 0.05
    assert saved["metrics"]["drop"]["TopKMetric"] == pytest.approx(
        saved["metrics"]["float"]["TopKMetric"] - saved["metrics"]["quant"]["TopKMetric"])
    assert saved["agreement"] == {"prob": 1.0}  # tiny_cnn's 100 predictions all survive quantization
    sims = saved["layer_similarity"]
    assert sims and sims == sorted(sims, key=lambda r: r["cosine"]) and sims[0]["cosine"] > 0.98
    template = json.loads((out / "tiny_cnn_opt_template.json").read_text())
    assert set(template) == {n.name for n in master.qgraph.nodes}
    layers = {r["layer"]: r for r in saved["layers"]}  # the per-layer plan
    assert list(layers) == [n.name for n in master.qgraph.nodes]
    conv1, t = layers["conv1"], master.qgraph.node("conv1").outputs[0]
    grid = conv1["outputs"][t.name]
    assert conv1["quantized"] and grid["dtype"] == str(t.dtype) and grid["scale"] == pytest.approx(float(t.scale))
    lo, hi = grid["range"]
    assert lo <= 0 <= hi and (hi - lo) * grid["scale"] == pytest.approx(t.qmax - t.qmin)
    assert conv1["weights"]["dtype"] == "int8" and "planned" not in conv1
    assert template["conv1"]["weight_bits"] == 8 and template["conv1"]["layer_type"] == "Convolution"
    # the written IR reloads into the same integers
    back = read_graph(str(out / "tiny_cnn_o.txt"))
    x = torch.from_numpy(np.load(f"{EXAMPLE}/data.npy")[:8]).float()
    assert torch.equal(back.forward([x])[0], master.qgraph.forward([x])[0])
    assert all(n.quantized for n in back.nodes)


def test_opt_config_overrides_and_float_layers(tmp_path):
    cfg_json = tmp_path / "layers.json"
    cfg_json.write_text(json.dumps({
        "conv1": {"weight_bits": 4, "layer_type": "Convolution"},
        "pw": {"trigger_float_op": True},
        "head": {"calibration_strategy_for_activation": "kld", "activation_bits": 16},
    }))
    master, report = run(tmp_path, opt_config=str(cfg_json), trigger_float_op="Concat")
    text = (tmp_path / "out" / "tiny_cnn_o.txt").read_text()
    back = read_graph(str(tmp_path / "out" / "tiny_cnn_o.txt"))
    conv1, pw, head = back.node("conv1"), back.node("pw"), back.node("head")
    assert conv1.constants["weights"].dtype.value == "aligned_int4"
    assert not pw.quantized and pw.outputs[0].dtype.value == "float32"
    assert pw.constants["weights"].dtype.value == "float32"
    assert head.outputs[0].dtype.value in ("int16", "uint16")
    cat = [n for n in back.nodes if n.type == "Concat"][0]
    assert not cat.quantized
    types = [n.type for n in back.nodes]
    assert "Quantize" in types and "DeQuantize" in types and "layer_type=DeQuantize" in text
    template = json.loads((tmp_path / "out" / "tiny_cnn_opt_template.json").read_text())
    assert template["conv1"]["weight_bits"] == 4 and template["pw"]["trigger_float_op"] is True
    assert template["head"]["calibration_strategy_for_activation"] == "kld"
    assert set(report["float_layers"]) == {"pw", cat.name}
    x = torch.from_numpy(np.load(f"{EXAMPLE}/data.npy")[:8]).float()
    assert torch.equal(back.forward([x])[0], master.qgraph.forward([x])[0])
    assert report["metrics"]["quant"]["TopKMetric"] > 0.8


def test_output_layers_keep_their_extrema_unless_opt_config_says_otherwise(tmp_path):
    master, _ = run(tmp_path, calibration_strategy_for_activation="99percentile")
    template = json.loads((tmp_path / "out" / "tiny_cnn_opt_template.json").read_text())
    outputs = {t.name for t in master.graph.output_tensors}
    writers = {n.name for n in master.graph.nodes if any(t.name in outputs for t in n.outputs)}
    assert writers
    for layer, entry in template.items():
        want = "extrema" if layer in writers else "99percentile"
        assert entry["calibration_strategy_for_activation"] == want, layer
    out = master.qgraph.output_tensors[0]
    assert (out.qmax + out.zerop) / out.scale == pytest.approx(max(out.statistics.max, -out.statistics.min), rel=0.01)
    cfg_json = tmp_path / "layers.json"
    cfg_json.write_text(json.dumps({w: {"calibration_strategy_for_activation": "mse"} for w in writers}))
    run(tmp_path, opt_config=str(cfg_json))
    template = json.loads((tmp_path / "out" / "tiny_cnn_opt_template.json").read_text())
    assert all(template[w]["calibration_strategy_for_activation"] == "mse" for w in writers)


def test_opt_config_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"conv_1": {"weight_bits": 4}}))
    with pytest.raises(NpuoptError, match="no layer named 'conv_1'.*conv1"):
        run(tmp_path, opt_config=str(bad))
    bad.write_text(json.dumps({"conv1": {"calibration_strategy_for_activation": "median"}}))
    with pytest.raises(NpuoptError, match="unknown calibration strategy 'median'.*known"):
        run(tmp_path, opt_config=str(bad))
    bad.write_text(json.dumps({"conv1": {"weight_bitz": 4}}))
    with pytest.raises(NpuoptError, match="unknown setting 'weight_bitz'"):
        run(tmp_path, opt_config=str(bad))


def test_statistic_file_second_run_skips_calibration(tmp_path, monkeypatch):
    stats = tmp_path / "stats.pt"
    _, first = run(tmp_path, statistic_file=str(stats))
    assert stats.is_file()
    calls = []
    monkeypatch.setattr(calibration_mod.Calibrator, "run", lambda self, b: calls.append(1))
    _, second = run(tmp_path, statistic_file=str(stats))
    assert not calls and second["metrics"]["quant"] == first["metrics"]["quant"]


def test_nan_calibration_data_warns(tmp_path, warnings):
    data = np.load(f"{EXAMPLE}/data.npy").copy()
    data[3, 0, 0, 0] = np.nan
    path = tmp_path / "nan.npy"
    np.save(path, data)
    run(tmp_path, calibration_data=str(path))
    nan_warnings = [w for w in warnings if "NaN" in w and w.startswith("calibration")]
    assert "tensor 'input'" in nan_warnings[0]
    # the NaN flows into every later tensor: one summary line names them, not one line each
    assert len(nan_warnings) == 2 and "also reached" in nan_warnings[1]


def test_empty_calibration_set_is_an_error(tmp_path):
    path = tmp_path / "empty.npy"
    np.save(path, np.zeros((0, 12, 12, 3), np.float32))
    with pytest.raises(DatasetError, match="empty"):
        run(tmp_path, calibration_data=str(path))
    assert not (tmp_path / "out" / "tiny_cnn_o.txt").exists()


def test_no_half_written_ir_on_failure(tmp_path, monkeypatch):
    import npuopt.ir.writer as writer
    calls = {"n": 0}
    real = writer.tensor_to_bytes

    def failing(value, dtype):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError("disk full")
        return real(value, dtype)

    monkeypatch.setattr(writer, "tensor_to_bytes", failing)
    with pytest.raises(NpuoptError):
        run(tmp_path)
    assert not (tmp_path / "out").exists()  # nor any other file: outputs appear only when the run succeeded


def test_layer_type_without_quantizer_stays_float(tmp_path, warnings):
    from npuopt.ir.builder import GraphBuilder
    name = register_optype("TestOnlyDouble")

    @op_register(name, "1.0")
    def _double(self, *args):
        self.outputs[0].betensor = self.inputs[0].betensor * 2
        return self.outputs[0].betensor

    b = GraphBuilder("t")
    x = b.input("x", [1, 4, 4, 2])
    b.layer("Activation", "relu", [x], dict(method="RELU"))
    b.layer(name, "dbl", ["relu"])
    b.layer("Activation", "sig", ["dbl"], dict(method="SIGMOID"))
    g = b.build(["sig"])
    from tests.test_quantize_ops import quantize
    qg = quantize(g, [(torch.randn(2, 4, 4, 2),)])
    assert not qg.node("dbl").quantized and qg.node("sig").quantized
    assert any("TestOnlyDouble" in w for w in warnings)
    out = qg.forward([torch.randn(2, 4, 4, 2)])[0]
    assert out.dtype == torch.uint8


def test_agreement_counts_unchanged_argmax():
    from npuopt.evaluation import Agreement
    a = Agreement()
    float_out = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    a.add(float_out, torch.tensor([[0.2, 0.8], [0.1, 0.9], [0.4, 0.6]]))  # the second sample flips
    a.add(float_out[:1], float_out[:1])
    assert a.same == 3 and a.count == 4 and a.fraction() == 0.75


def test_output_cosine_is_the_mean_over_samples():
    from npuopt.evaluation import OutputCosine
    c = OutputCosine()
    c.add(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([[3.0, 0.0], [2.0, 0.0]]))  # cosines 1 and 0
    assert c.count == 2 and c.mean() == pytest.approx(0.5)
    c.add(torch.tensor([[1.0, 1.0]]), torch.tensor([[-1.0, -1.0]]))
    assert c.mean() == pytest.approx(0.0)


@pytest.mark.parametrize("method, hinted", [("per_channel_symmetric_restricted_range", True),
                                            ("per_channel_asymmetric", False)])
def test_4bit_weights_on_a_restricted_range_get_a_hint(tmp_path, caplog, method, hinted):
    """A 4-bit restricted grid has 15 levels (-7..7); the log says what keeps the 16th."""
    with caplog.at_level("INFO", logger="npuopt"):
        run(tmp_path, weight_bits="4", quantize_method_for_weight=method, global_calibration="none")
    assert ("uses one level less than the bits give" in caplog.text) == hinted
