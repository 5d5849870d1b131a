"""The `npuopt` command as a user runs it: --version, --help, --field, the example cfg
from another folder with --set overrides, and one-line errors (a traceback only with
--verbose)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import npuopt
from npuopt.config import field_table
from npuopt.data import split_batch
from npuopt.dtype import Dtype
from npuopt.errors import DatasetError
from npuopt.tensor import PyTensor

from conftest import (REPO, TINY_CNN_CFG, assert_one_line_error, error_lines, run_in_process, start_npuopt,
                      write_cfg, write_tiny_ir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The module's slow runs (each imports torch), started together."""
    root = tmp_path_factory.mktemp("cli")
    bad_data = root / "bad.npy"
    np.save(bad_data, np.zeros((3, 5, 5, 3), np.float32))
    broken = write_tiny_ir(root / "broken")
    broken.with_suffix(".bin").unlink()
    broken_cfg = write_cfg(root / "broken.cfg", graph=broken, output_dir=root / "broken_out")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {
        "root": root,
        "example": start_npuopt("--cfg", TINY_CNN_CFG, "--set", "output_dir=out", "--set", "metric=TopKMetric(3)",
                                "--set", "metric_batch_size=7", cwd=elsewhere),
        "bad_dataset": start_npuopt("--cfg", TINY_CNN_CFG, "--set", f"data={bad_data}", "--set", "label=",
                                    "--set", f"output_dir={root / 'bad_out'}", cwd=root),
        "verbose": start_npuopt("--cfg", broken_cfg, "--verbose", cwd=root),
    }


def test_version_from_the_console_script(tmp_path):
    script = shutil.which("npuopt", path=str(Path(sys.executable).parent))
    assert script, f"the console script 'npuopt' is not installed beside {sys.executable}"
    result = subprocess.run([script, "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.strip() == f"npuopt, version {npuopt.__version__}"


def test_python_m_npuopt_help(tmp_path):
    result = subprocess.run([sys.executable, "-m", "npuopt", "--help"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("Usage: npuopt [OPTIONS]")
    for option in ("--cfg FILE", "--set FIELD=VALUE", "--field", "--plugin", "--verbose", "--version"):
        assert option in result.stdout


def test_field_lists_every_field_with_its_default():
    result = run_in_process("--field")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    fields = field_table()  # after --field loaded the plugins, which may add fields
    assert len(lines) == 2 * len(fields)
    for field, name_line, help_line in zip(fields, lines[::2], lines[1::2]):
        assert name_line.split(None, 2) == [field.name, "default:", field.default or "(empty)"]
        assert help_line.strip() == f"{field.help}; accepts {field.accepts}"
    assert any(line.split()[:3] == ["output_dir", "default:", "./npuopt_output"] for line in lines)


def test_example_cfg_runs_from_another_folder_with_set_overrides(runs):
    result = runs["example"].result()
    assert result.returncode == 0, result.stderr
    assert error_lines(result) == []
    report_file = runs["root"] / "elsewhere" / "out" / "tiny_cnn_report.json"  # --set output_dir: from the cwd
    assert f"report: {report_file}" in result.stdout
    report = json.loads(report_file.read_text())
    assert report["model"] == "tiny_cnn"
    assert list(report["metrics"]["float"]) == ["TopKMetric(3)"]  # --set metric replaced the cfg's two
    assert 0.0 <= report["metrics"]["float"]["TopKMetric(3)"] <= 1.0
    assert report["samples"] == len(np.load(REPO / "examples" / "tiny_cnn" / "data.npy"))
    assert report["outputs"]["prob"]["shape"] == [4]


def test_dataset_with_wrong_sample_shape_is_one_line_naming_the_input(runs):
    assert_one_line_error(runs["bad_dataset"].result(), "dataset 'NumpyDataset' yields shape [5, 5, 3] per sample "
                          "for input 'input'; the IR says [12, 12, 3]", only_line=False)


def test_verbose_shows_the_traceback_then_the_error_line(runs):
    result = runs["verbose"].result()
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip("\n").splitlines()[-1].startswith("npuopt: error: weights file ")
    assert len(error_lines(result)) == 1


def test_no_arguments_prints_help():
    result = run_in_process()
    assert result.exit_code == 0 and result.output.startswith("Usage:")


def test_set_without_equals_is_one_line(tmp_path):
    cfg = write_cfg(tmp_path / "opt.cfg", graph="g.txt")
    result = run_in_process("--cfg", cfg, "--set", "metric")
    assert result.exit_code == 1
    assert result.stderr == "npuopt: error: --set 'metric': expected FIELD=VALUE\n"


def test_a_bug_is_still_one_line_pointing_to_verbose(tmp_path, monkeypatch):
    from npuopt import optmaster

    def broken_run(self):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(optmaster.OptMaster, "run", broken_run)
    cfg = write_cfg(tmp_path / "opt.cfg", graph="g.txt", device="cpu")
    result = run_in_process("--cfg", cfg)
    assert result.exit_code == 1
    assert result.stderr == ("npuopt: error: internal error: ZeroDivisionError: boom "
                             "(run with --verbose for the traceback)\n")


@pytest.mark.parametrize("dtype, batch, expected", [
    (Dtype.FP32, (torch.zeros(2, 5, 5, 3), torch.zeros(2)),
     "yields shape [5, 5, 3] per sample for input 'input'; the IR says [12, 12, 3]"),
    (Dtype.FP32, ([{"a": 1}], torch.zeros(1)), "yields a dict for input 'input', not an array of numbers"),
    (Dtype.FP32, ([torch.zeros(2, 12, 12, 3)] * 2, torch.zeros(2)),
     "yields 2 input(s) per sample; the graph takes 1 (input)"),
    (Dtype.INT8, (torch.zeros(2, 12, 12, 3), None), "yields torch.float32 for input 'input', which is int8"),
])
def test_batches_that_do_not_fit_the_graph_are_dataset_errors(dtype, batch, expected):
    inputs = [PyTensor("input", dtype=dtype, ir_shape=(1, 12, 12, 3))]
    with pytest.raises(DatasetError) as info:
        split_batch(batch, inputs, "MyData", "cpu")
    assert str(info.value).startswith(f"dataset 'MyData' {expected}")
