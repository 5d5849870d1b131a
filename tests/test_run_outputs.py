"""Issue 13: a run's files appear only when the whole run succeeded (npuopt/outputs.py).

Three concurrent runs into one output_dir, two that succeed with different settings and
one that fails after its IR was written, leave the files of exactly one successful run
and no temporary file; a run stopped by SIGINT or SIGTERM leaves nothing."""
import json
import re
import signal
import subprocess
import sys

import pytest

from conftest import REPO, assert_one_line_error, npuopt_env, start_npuopt, write_cfg

EXAMPLE = REPO / "examples" / "tiny_cnn"
OUTPUTS = {"tiny_cnn_o.txt", "tiny_cnn_o.bin", "tiny_cnn_opt_template.json", "tiny_cnn_report.json"}
FAILING_METRIC = """
from npuopt.framework import OptBaseMetric, PluginType, register_plugin
@register_plugin(PluginType.Metric, "1.0")
class FailsAtTheEnd(OptBaseMetric):
    def __init__(self):
        pass
    def reset(self):
        pass
    def __call__(self, pred, target):
        pass
    def compute(self):
        raise RuntimeError("no value")
"""


def example_cfg(path, **fields):
    values = dict(graph=EXAMPLE / "tiny_cnn.txt", model_name="tiny_cnn", output_dir=path.parent / "out",
                  dataset="NumpyDataset", calibration_data=EXAMPLE / "data.npy", data=EXAMPLE / "data.npy",
                  label=EXAMPLE / "labels.npy", metric="TopKMetric", device="cpu")
    values.update(fields)
    return write_cfg(path, **values)


def test_concurrent_runs_into_one_output_dir_leave_one_runs_files(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fails_at_the_end.py").write_text(FAILING_METRIC)
    runs = {
        "int8": example_cfg(tmp_path / "int8.cfg"),
        "int16, float Softmax": example_cfg(tmp_path / "int16.cfg", activation_bits=16, trigger_float_op="Softmax"),
        "failing": example_cfg(tmp_path / "failing.cfg", metric="FailsAtTheEnd"),
    }
    futures = {name: start_npuopt("--cfg", cfg, cwd=tmp_path, plugin_path=plugins) for name, cfg in runs.items()}
    results = {name: future.result() for name, future in futures.items()}
    for name in ("int8", "int16, float Softmax"):
        assert results[name].returncode == 0, results[name].stderr
    assert_one_line_error(results["failing"], "fails_at_the_end.py", "FailsAtTheEnd", "no value", only_line=False)
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == OUTPUTS  # no temporary file left
    txt = (out / "tiny_cnn_o.txt").read_text()
    float_softmax = "layer_type=DeQuantize" in txt
    template = json.loads((out / "tiny_cnn_opt_template.json").read_text())
    report = json.loads((out / "tiny_cnn_report.json").read_text())
    assert template["prob"]["trigger_float_op"] == float_softmax
    assert template["conv1"]["activation_bits"] == (16 if float_softmax else 8)
    assert report["float_layers"] == (["prob"] if float_softmax else [])
    assert ("layer_top_type=[int16]" in txt) == float_softmax
    ends = [int(o) + int(s) for o, s in re.findall(r"_offset=(\d+)\n\w+_size=(\d+)", txt)]
    assert max(ends) == (out / "tiny_cnn_o.bin").stat().st_size  # the .bin of that .txt


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_leaves_nothing(tmp_path, sig):
    # one sample per metric batch: the evaluation, after the IR is written, lasts long enough
    cfg = example_cfg(tmp_path / "opt.cfg", metric_batch_size=1, dump="true")
    process = subprocess.Popen([sys.executable, "-m", "npuopt", "--cfg", str(cfg)], cwd=tmp_path, env=npuopt_env(),
                               stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "written (in place once the whole run succeeded)" in line:
            process.send_signal(sig)
            break
    lines += process.stderr.readlines()
    assert process.wait(timeout=120) == 1, "".join(lines)
    assert lines[-1].strip() == f"npuopt: error: interrupted by {sig.name}", "".join(lines)
    assert not (tmp_path / "out").exists(), sorted(p.name for p in (tmp_path / "out").rglob("*"))


def test_a_signal_while_a_progress_bar_is_being_made_still_gives_the_error_line():
    # CI once caught SIGTERM inside tqdm's constructor: the half-made bar has no position,
    # and closing it raised AttributeError instead of printing the error line
    from tqdm import tqdm

    from npuopt.cli import _close_progress_bars

    half_made = tqdm.__new__(tqdm)
    setattr(half_made, "disable", False)  # set in __init__ before the position
    _close_progress_bars()
    tqdm._instances.discard(half_made)
