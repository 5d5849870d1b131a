"""The quantization plan (npuopt/quant/plan.py): one layer's settings changed in the plan
re-quantize that layer and the layers its change reaches, and the IR written then is
the one a fresh run with those settings in its opt_config writes."""
import json
import os

import pytest

from npuopt.config import load_config
from npuopt.errors import ConfigError
from npuopt.ir import write_graph
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "tiny_cnn")


def run(folder, **fields):
    folder.mkdir(parents=True, exist_ok=True)
    values = dict(graph=f"{EXAMPLE}/tiny_cnn.txt", bin=f"{EXAMPLE}/tiny_cnn.bin", model_name="tiny_cnn",
                  output_dir=folder / "out", dataset="NumpyDataset", calibration_data=f"{EXAMPLE}/data.npy",
                  statistic_file=folder.parent / "statistics.npy", global_calibration="none", device="cpu",
                  quantize_method_for_weight="per_channel_symmetric_restricted_range",
                  quantize_method_for_activation="per_tensor_asymmetric")
    values.update(fields)
    (folder / "opt.cfg").write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    load_plugins()
    master = OptMaster(load_config(str(folder / "opt.cfg")))
    master.run()
    return master


def written(graph, folder):
    folder.mkdir(parents=True, exist_ok=True)
    graph.zero_forward()
    write_graph(graph, str(folder / "m_o.txt"), str(folder / "m_o.bin"))
    return (folder / "m_o.txt").read_bytes(), (folder / "m_o.bin").read_bytes()


CHANGES = [  # (layer, settings, the layers quantized again)
    ("dw", {"activation_bits": 16}, {"dw", "pw"}),            # its output grid, and its reader's rescale
    ("conv1", {"weight_bits": 4}, {"conv1"}),                  # its weights only: its output grid stays
    ("pw", {"quantize_method_for_activation": "per_tensor_symmetric_full_range"}, None),
]


def test_a_changed_layer_gives_the_ir_of_a_fresh_run(tmp_path):
    master = run(tmp_path / "first")
    before = written(master.plan.qgraph, tmp_path / "before")
    asked = {}
    for i, (layer, values, expected) in enumerate(CHANGES):
        redone = master.plan.change(layer, **values)
        assert redone is not None and layer in redone
        if expected is not None:
            assert redone == expected
        assert len(redone) < len(master.plan.qgraph.nodes) / 2
        asked[layer] = {**asked.get(layer, {}), **values}
        (tmp_path / f"opt_config{i}.json").write_text(json.dumps(asked))
        fresh = run(tmp_path / f"fresh{i}", opt_config=tmp_path / f"opt_config{i}.json")
        ours = written(master.plan.qgraph, tmp_path / f"changed{i}")
        assert ours == written(fresh.qgraph, tmp_path / f"fresh_written{i}"), f"after changing {layer}: {values}"
        assert ours != before


def test_a_change_to_a_float_layer_builds_the_graph_again(tmp_path):
    master = run(tmp_path / "first")
    assert master.plan.change("dw", trigger_float_op=True) is None
    assert "dw" in master.plan.float_kept
    fresh = run(tmp_path / "fresh", trigger_float_op="dw")
    assert written(master.plan.qgraph, tmp_path / "a") == written(fresh.qgraph, tmp_path / "b")


def test_an_unknown_layer_or_setting_is_refused_in_one_line(tmp_path):
    master = run(tmp_path / "first")
    with pytest.raises(ConfigError, match="plan: no layer named 'nope'"):
        master.plan.change("nope", activation_bits=16)
    with pytest.raises(ConfigError, match="plan: layer 'dw': unknown setting.s. activation_bit "):
        master.plan.change("dw", activation_bit=16)


def test_algorithms_read_the_plan_realised_and_replan_only_what_they_edited(tmp_path, monkeypatch):
    """What global calibration methods and unify_scales* do: read decisions from
    plan.realised(), edit the plan of some layers, replan them. The realised graph is
    made once, and after the edits equals one made anew from the edited plan."""
    import npuopt.quant.plan as plan_module
    from npuopt.quant import tensors as QT
    master = run(tmp_path / "first")
    plan, graph = master.plan, master.graph
    builds = []
    made = plan_module.build_quantized_graph
    monkeypatch.setattr(plan_module, "build_quantized_graph", lambda *a: builds.append(a) or made(*a))
    realised = plan.realised()
    before = written(realised, tmp_path / "before")
    conv1, dw = graph.node("conv1"), graph.node("dw")
    lo, hi = QT.weight_range(conv1, "weights", 0)
    QT.plan_weight_range(conv1, "weights", lo * 0.5, hi * 0.5)      # its weights only: its output grid stays
    lo, hi = QT.activation_range(dw, dw.outputs[0], False)
    QT.plan_activation_range(dw.outputs[0], lo * 0.5, hi * 0.5)      # its output grid, and its reader's rescale
    assert plan.replan("conv1", "dw") == {"conv1", "dw", "pw"}
    assert plan.realised() is realised and len(builds) == 1
    edited = written(realised, tmp_path / "edited")
    plan.forget()
    assert written(plan.realised(), tmp_path / "anew") == edited != before
    assert len(builds) == 2


@pytest.mark.parametrize("method", ["easy_quant", "svd_quant", "svd_quant[3]"])
def test_after_a_method_the_realised_plan_is_the_one_made_anew(tmp_path, monkeypatch, method):
    """A method that reads and edits the plan many times (easy_quant replans a layer for
    each range it tries) leaves the realised graph equal to one made from its plan anew."""
    from npuopt.quant.plan import QuantPlan
    seen = []
    build = QuantPlan.build

    def checked(self):
        kept = written(self.realised(), tmp_path / "kept")
        self.forget()
        seen.append(kept == written(self.realised(), tmp_path / "anew"))
        return build(self)
    monkeypatch.setattr(QuantPlan, "build", checked)
    run(tmp_path / "run", global_calibration=method)
    assert seen == [True]
