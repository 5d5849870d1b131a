"""Issue 2, point 4 (config): the cfg file's errors name the file, the field and what
it accepts; relative paths are taken from the cfg file's folder (from the working
directory with --set)."""
import os

import pytest

from npuopt import cfg_reader
from npuopt.config import FIELDS, defaults, load_config
from npuopt.errors import ConfigError

from conftest import assert_one_line_error, assert_verbose_traceback, start_npuopt, write_cfg


@pytest.fixture(autouse=True)
def _restore_active_cfg(monkeypatch):
    monkeypatch.setattr(cfg_reader, "_current", None)


# ---- through the CLI: one line, no traceback ----------------------------------------
def unknown_field(folder):
    return write_cfg(folder / "opt.cfg", graph="g.txt", grpah="g.txt"), [
        "opt.cfg: unknown field 'grpah'; did you mean graph?"]


def bad_value(folder):
    return write_cfg(folder / "opt.cfg", graph="g.txt", weight_bits="40"), [
        "opt.cfg: field 'weight_bits': '40' is not accepted; expects an integer from 2 to 16"]


def missing_common(folder):
    cfg = folder / "opt.cfg"
    cfg.write_text("[common]\ngraph = g.txt\n")
    return cfg, ["opt.cfg: no [Common] section"]


def missing_cfg_file(folder):
    return folder / "absent.cfg", ["cfg file", "absent.cfg' not found"]


CLI_CASES = [unknown_field, bad_value, missing_common, missing_cfg_file]


@pytest.fixture(scope="module")
def cli_cases(request, tmp_path_factory):
    """Every selected case written and its CLI run started at once."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if item.originalname == "test_cfg_error_in_cli"}
    built = {}
    for make in (m for m in CLI_CASES if m.__name__ in selected):
        folder = tmp_path_factory.mktemp(make.__name__)
        cfg, fragments = make(folder)
        built[make.__name__] = (cfg, fragments, start_npuopt("--cfg", cfg, cwd=folder))
    return built


@pytest.mark.parametrize("case", [make.__name__ for make in CLI_CASES])
def test_cfg_error_in_cli(cli_cases, case):
    cfg, fragments, run = cli_cases[case]
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg))
    for fragment in fragments:
        assert fragment in str(info.value)
    assert_one_line_error(run.result(), *fragments)
    assert_verbose_traceback("--cfg", cfg, fragment=fragments[-1])


# ---- field checks ---------------------------------------------------------------------
@pytest.mark.parametrize("name, suggestions", [
    ("metrics", ["metric"]),
    ("calibration_strategy_for_weights", ["calibration_strategy_for_weight"]),
    ("weight_bit", ["weight_bits"]),
])
def test_unknown_field_suggests_the_closest_names(tmp_path, name, suggestions):
    cfg = write_cfg(tmp_path / "opt.cfg", graph="g.txt", **{name: "1"})
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg))
    message = str(info.value)
    assert message.startswith(f"{cfg}: unknown field '{name}'; did you mean ")
    for suggestion in suggestions:
        assert suggestion in message


def test_unknown_field_with_nothing_close_points_to_field_list(tmp_path):
    cfg = write_cfg(tmp_path / "opt.cfg", graph="g.txt", zzzz="1")
    with pytest.raises(ConfigError, match=r"unknown field 'zzzz'; see npuopt --field"):
        load_config(str(cfg))


@pytest.mark.parametrize("field, value, accepts", [
    ("weight_bits", "8.5", "an integer from 2 to 16"),
    ("activation_bits", "7", "an integer from 8 to 16"),
    ("device", "tpu", "cpu, cuda, auto"),
    ("dump", "maybe", "true or false"),
    ("calibration_strategy_for_activation", "99.9", "<P>percentile"),
    ("metric", "Top K", "comma-separated plugin names"),
    ("quantize_method_for_weight", "per_layer", "per_tensor_symmetric_restricted_range"),
    ("running_statistic_momentum", "1.5", "a number from 0 to 1"),
])
def test_bad_value_names_field_and_what_it_accepts(tmp_path, field, value, accepts):
    cfg = write_cfg(tmp_path / "opt.cfg", graph="g.txt", **{field: value})
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg))
    assert f"field '{field}': '{value}' is not accepted; expects " in str(info.value)
    assert accepts in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("graph = g.txt\n", "cannot parse: File contains no section headers"),
    ("[Common]\ngraph = a.txt\ngraph = b.txt\n", "cannot parse: While reading from"),
    ("[Common]\nmetric = TopKMetric\n", "field 'graph' is required"),
])
def test_malformed_cfg_file(tmp_path, text, expected):
    cfg = tmp_path / "opt.cfg"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_config(str(cfg))


def test_cfg_not_utf8_and_cfg_folder(tmp_path):
    cfg = tmp_path / "opt.cfg"
    cfg.write_bytes(b"[Common]\ngraph = \xff.txt\n")
    with pytest.raises(ConfigError, match=r"opt\.cfg: not UTF-8 text"):
        load_config(str(cfg))
    with pytest.raises(ConfigError, match=r"cfg file '.*' is a folder, not a file"):
        load_config(str(tmp_path))


def test_every_field_default_is_accepted():
    values = defaults().as_dict()
    assert set(values) == set(FIELDS)
    assert values["weight_bits"] == 8 and values["trigger_float_op"] == [] and values["dump"] is False


# ---- paths ------------------------------------------------------------------------------
def test_relative_paths_resolve_against_the_cfg_folder(tmp_path, monkeypatch):
    cfg_dir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    cfg = write_cfg(cfg_dir / "opt.cfg", graph="ir/m.txt", data="../data/x.npy", label="", metric="TopKMetric")
    monkeypatch.chdir(elsewhere)
    loaded = load_config(str(cfg))
    assert loaded.graph == str(cfg_dir / "ir" / "m.txt")
    assert loaded.data == str(tmp_path / "data" / "x.npy")
    assert loaded.output_dir == str(cfg_dir / "npuopt_output")  # the default ./npuopt_output
    assert loaded.label == "" and loaded.bin == ""  # empty paths stay unset
    assert loaded.source == str(cfg)


def test_set_overrides_win_and_resolve_against_the_working_directory(tmp_path, monkeypatch):
    cfg = write_cfg(tmp_path / "project" / "opt.cfg", graph="m.txt", metric_batch_size="4",
                    output_dir="out")
    monkeypatch.chdir(tmp_path)
    loaded = load_config(str(cfg), {"metric_batch_size": "7", "output_dir": "mine", "graph": "/abs/g.txt"})
    assert loaded.metric_batch_size == 7
    assert loaded.output_dir == str(tmp_path / "mine")
    assert loaded.graph == "/abs/g.txt"
    with pytest.raises(ConfigError, match=r"--set: unknown field 'metric_batchsize'; did you mean metric_batch_size"):
        load_config(str(cfg), {"metric_batchsize": "7"})
    with pytest.raises(ConfigError, match=r"--set: field 'metric_batch_size': '0' is not accepted"):
        load_config(str(cfg), {"metric_batch_size": "0"})


def test_home_relative_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = write_cfg(tmp_path / "opt.cfg", graph="~/m.txt")
    assert load_config(str(cfg)).graph == os.path.join(str(tmp_path / "home"), "m.txt")
