"""Settings are parsed once per run: the cfg's text becomes typed values when the cfg is
read (and an opt_config entry when the opt_config is read), and the run only reads
them; the global_calibration spec is resolved once. Counted on the example model with
per-layer forms, an opt_config and two global calibration methods."""
import json
import os

import pytest

from npuopt.config import load_config
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins
from npuopt.quant import formats, global_calibration, strategies

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "tiny_cnn")


@pytest.fixture
def counts(monkeypatch):
    """How often each kind of setting was taken apart, and the spec resolved."""
    seen = {"method": [], "strategy": [], "resolve": 0, "scope": 0}
    make_method, make_strategy = formats.QuantMethod.__new__, strategies.Strategy.__new__
    resolve, scope_of = global_calibration.resolve, global_calibration.scope_of

    def method(cls, text):
        if not isinstance(text, formats.QuantMethod):
            seen["method"].append(str(text))
        return make_method(cls, text)

    def strategy(cls, text, *args):
        seen["strategy"].append(text)
        return make_strategy(cls, text, *args)

    def counted_resolve(spec, ranks=1):
        seen["resolve"] += 1
        return resolve(spec, ranks)

    def counted_scope(text):
        seen["scope"] += 1
        return scope_of(text)
    monkeypatch.setattr(formats.QuantMethod, "__new__", method)
    monkeypatch.setattr(strategies.Strategy, "__new__", strategy)
    monkeypatch.setattr(global_calibration, "resolve", counted_resolve)
    monkeypatch.setattr(global_calibration, "scope_of", counted_scope)
    return seen


def test_each_setting_is_parsed_once_per_run(tmp_path, counts):
    opt_config = tmp_path / "opt_config.json"
    opt_config.write_text(json.dumps({"conv1": {"quantize_method_for_activation": "per_tensor_symmetric_full_range"},
                                      "pw": {"calibration_strategy_for_activation": "99.9percentile"}}))
    cfg_file = tmp_path / "opt.cfg"
    cfg_file.write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in dict(
        graph=f"{EXAMPLE}/tiny_cnn.txt", bin=f"{EXAMPLE}/tiny_cnn.bin", output_dir=tmp_path / "out",
        dataset="NumpyDataset", calibration_data=f"{EXAMPLE}/data.npy", device="cpu", opt_config=opt_config,
        quantize_method_for_weight="per_tensor_symmetric_restricted_range & <[Convolution]:per_channel_asymmetric>",
        calibration_strategy_for_activation="mean & <[Pooling]:extrema>",
        global_calibration="adaround[0,2][Convolution] & bias_correction").items()))
    load_plugins()
    cfg = load_config(str(cfg_file))
    # the defaults (2 methods, 2 strategies) and the cfg's values, each once
    assert sorted(counts["method"]) == sorted(["per_tensor_symmetric_restricted_range",
                                               "per_tensor_symmetric_full_range",
                                               "per_tensor_symmetric_restricted_range", "per_channel_asymmetric"])
    assert sorted(counts["strategy"]) == sorted(["extrema", "mean", "mean", "extrema"])
    for kind in ("method", "strategy"):
        counts[kind].clear()
    master = OptMaster(cfg)
    master.run()
    # the run itself parses only the opt_config's two entries, once each, whatever the layer count
    assert counts["method"] == ["per_tensor_symmetric_full_range"]
    assert counts["strategy"] == ["99.9percentile"]
    assert counts["resolve"] == 1 and counts["scope"] == 2
    assert master.report["global_calibration"] == ["adaround", "bias_correction"]
    settings = master.settings
    assert settings["conv1"].quantize_method_for_activation.symmetric  # the opt_config's
    assert settings["conv1"].quantize_method_for_weight.per_channel     # the per-layer form's
    assert settings["pw"].calibration_strategy_for_activation.number == 99.9
    assert settings["pool1"].calibration_strategy_for_activation.kind == "extrema"
