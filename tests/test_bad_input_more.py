"""Issue 23, bad input of `npuopt` and `npuopt-export` run as a user runs them: each stops
with one error line naming the culprit, a non-zero exit, no traceback and nothing written
(the case's folder is as it was before the run); and an IR header line npuopt does not
know is kept in the quantized IR, which the tool chain's readers still read.

1. a dataset plugin whose __len__ raises or is no count, or whose __getitem__ fails (in
   DataLoader workers too): the field, the plugin's file and its class are named;
2. an output_dir that cannot be made (under a file, not writable): refused before any work;
3. npuopt-export with an absurd --input-shape;
4. npuopt-export of a module that calls sys.exit (at import, in its factory, in forward);
5. unknown IR header lines kept, in order, in the quantized IR.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch

import npuopt.quant.calibration as calibration_mod
import npuopt_export.export as export_mod
from npuopt.datasets_common import no_label
from npuopt.framework import Dataset, PluginType, register_plugin
from npuopt.ir import read_graph
from npuopt_run.irfile import read_model

from conftest import REPO, invoke_export, run_in_process, write_cfg, write_tiny_ir

EXAMPLE = REPO / "examples" / "tiny_cnn"
DATA = np.load(EXAMPLE / "data.npy")
THIS_FILE = os.path.realpath(__file__)


@register_plugin(PluginType.Dataset, "1.0")
class MoreBadInputDataset(Dataset):
    """Eight samples of the example; the data file holds one word saying what goes wrong."""

    def __init__(self, data_file, label_file=None):
        self.mode = Path(data_file).read_text().strip()
        if self.mode == "init_exits":
            sys.exit(2)

    def __len__(self):
        if self.mode == "len_raises":
            raise RuntimeError("cannot count the samples")
        return {"len_negative": -3, "len_float": 8.0, "len_text": "8", "len_huge": 1 << 70}.get(self.mode, 8)

    def __getitem__(self, i):
        if self.mode == "getitem_raises":
            raise KeyError(f"sample {i}")
        if self.mode == "getitem_exits" and i >= 4:  # past the up-front check: in a DataLoader worker
            sys.exit(7)
        return DATA[i], no_label()


@register_plugin(PluginType.Dataset, "1.0")
class NoLengthDataset(Dataset):
    """A map-style dataset that forgot its __len__."""

    def __init__(self, data_file, label_file=None):
        pass

    def __getitem__(self, i):
        return DATA[i], no_label()


def snapshot(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*")) if "__pycache__" not in p.parts}


def assert_one_error_line(code: int, stdout: str, stderr: str, prefix: str, *fragments: str) -> str:
    """A non-zero exit, no traceback, and stderr's last line the only error line, naming every fragment."""
    report = f"exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert code == 1, report
    assert "Traceback" not in stdout + stderr, report
    lines = stderr.rstrip("\n").split("\n")
    errors = [line for line in lines if f"{prefix}: error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1] and errors[0].startswith(f"{prefix}: error: "), report
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in the error line\n{report}"
    return errors[0]


def npuopt_cfg(tmp_path: Path, **fields) -> Path:
    values = dict(graph=EXAMPLE / "tiny_cnn.txt", model_name="tiny_cnn", output_dir=tmp_path / "out",
                  dataset="NumpyDataset", calibration_data=EXAMPLE / "data.npy", calibration_batch_size=4,
                  device="cpu", global_calibration="none")
    values.update(fields)
    return write_cfg(tmp_path / "opt.cfg", **values)


def word(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"{text}.txt"
    path.write_text(text)
    return path


# ---- 1. dataset plugins -----------------------------------------------------------------
@pytest.mark.parametrize("field, mode, dataset, workers, fragment", [
    ("calibration_data", "len_raises", "MoreBadInputDataset", 0,
     "__len__() failed: RuntimeError: cannot count the samples"),
    ("data", "len_raises", "MoreBadInputDataset", 0, "__len__() failed: RuntimeError: cannot count the samples"),
    ("calibration_data", "len_negative", "MoreBadInputDataset", 0, "__len__() returned -3 (int); expected"),
    ("data", "len_float", "MoreBadInputDataset", 0, "__len__() returned 8.0 (float)"),
    ("calibration_data", "len_text", "MoreBadInputDataset", 0, "__len__() returned '8' (str)"),
    ("calibration_data", "len_huge", "MoreBadInputDataset", 0, f"__len__() returned {1 << 70} (int)"),
    ("calibration_data", "no_len", "NoLengthDataset", 0, "its class defines no __len__"),
    ("calibration_data", "init_exits", "MoreBadInputDataset", 0, "could not open '"),
    ("data", "getitem_raises", "MoreBadInputDataset", 0, "failed while loading a batch: KeyError: 'sample 0'"),
    ("calibration_data", "getitem_exits", "MoreBadInputDataset", 2,
     "failed while loading a batch (worker process "),
])
def test_a_dataset_plugin_that_fails_names_field_file_and_class(tmp_path, field, mode, dataset, workers, fragment):
    files = {"calibration_data": word(tmp_path, "fine"), "data": word(tmp_path, mode)} if field == "data" else \
        {"calibration_data": word(tmp_path, mode), "data": ""}
    cfg = npuopt_cfg(tmp_path, dataset=dataset, dataloader_workers=workers, metric="TopKMetric", **files)
    before = snapshot(tmp_path)
    result = run_in_process("--cfg", cfg)
    line = assert_one_error_line(result.exit_code, result.stdout, result.stderr, "npuopt", f"field '{field}'",
                                 f"plugin '{THIS_FILE}'", f"dataset '{dataset}'", fragment)
    if mode.endswith("exits"):
        assert "sys.exit(" in line, line
    assert snapshot(tmp_path) == before


# ---- 2. output_dir ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["under_a_file", "deep_under_a_file", "read_only_folder", "special_file_system"])
def test_an_output_dir_that_cannot_be_made_stops_before_any_work(tmp_path, monkeypatch, where):
    (tmp_path / "a_file").write_text("not a folder\n")
    if where == "read_only_folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a folder whatever its permission bits")
        (tmp_path / "locked").mkdir()
        (tmp_path / "locked").chmod(0o555)
    if where == "special_file_system" and not os.path.isdir("/sys"):
        pytest.skip("no /sys here")
    output_dir, fragments = {
        "under_a_file": (tmp_path / "a_file" / "out", ["cannot be created", "a_file' is a file"]),
        "deep_under_a_file": (tmp_path / "a_file" / "x" / "y", ["cannot be created", "a_file' is a file"]),
        "read_only_folder": (tmp_path / "locked" / "out", ["cannot be created in '", "locked'"]),
        "special_file_system": (Path("/sys/npuopt-test-out"), ["cannot be created in '/sys'"]),
    }[where]
    calibrated = []
    monkeypatch.setattr(calibration_mod.Calibrator, "run", lambda self, b: calibrated.append(1))
    cfg = npuopt_cfg(tmp_path, output_dir=output_dir)
    before = snapshot(tmp_path)
    try:
        result = run_in_process("--cfg", cfg)
    finally:
        if where == "read_only_folder":
            (tmp_path / "locked").chmod(0o755)
    assert_one_error_line(result.exit_code, result.stdout, result.stderr, "npuopt",
                          f"field 'output_dir' '{output_dir}'", *fragments)
    assert calibrated == []
    assert snapshot(tmp_path) == before and not output_dir.exists()


# ---- 3 and 4. npuopt-export ----------------------------------------------------------------
MODELS = {
    "more_netdefs.py": '''
        import sys
        import torch


        class Net(torch.nn.Module):
            def __init__(self, exits=False):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
                self.exits = exits

            def forward(self, x):
                if self.exits:
                    sys.exit(5)
                return torch.relu(self.conv(x))


        def net():
            return Net()


        def exits_in_factory():
            sys.exit("no licence")


        def exits_in_forward():
            return Net(exits=True)
    ''',
    "exits_at_import.py": '''
        import sys
        sys.exit(3)
    ''',
    "imports_an_exiting_helper.py": '''
        import exiting_helper
    ''',
    "exiting_helper.py": '''
        raise SystemExit(4)
    ''',
}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export_more")
    for name, body in MODELS.items():
        (folder / name).write_text(textwrap.dedent(body))
    return folder


@pytest.mark.parametrize("shapes, fragments", [
    (["0,3,8,8"], ["--input-shape '0,3,8,8'", "positive integers"]),
    (["1,3,-8,8"], ["--input-shape '1,3,-8,8'", "positive integers"]),
    (["1,3,8.5,8"], ["--input-shape '1,3,8.5,8'", "positive integers"]),
    (["1,3,1e3,8"], ["--input-shape '1,3,1e3,8'", "positive integers"]),
    (["1_0,3,8,8"], ["--input-shape '1_0,3,8,8'", "positive integers"]),
    (["1,3,,8"], ["--input-shape '1,3,,8'", "positive integers"]),
    (["1,3,100000,100000"], ["--input-shape '1,3,100000,100000'", "30000000000 elements, more than the 2^31"]),
    (["99999999999999999999999,3,8,8"], ["--input-shape '99999999999999999999999,3,8,8'", "more than the 2^31"]),
    (["1,3,8192,8192"], ["--input-shape 1,3,8192,8192", "need 3.0 GiB", "1.0 GiB of memory is available"]),
    (["1,1,3,8,8"], ["the model does not run on input shape 1,1,3,8,8"]),
    (["1,3,8"], ["the model does not run on input shape 1,3,8"]),
    (["3,8,8"], ["(Conv2d)", "takes a 4-D (N, C, H, W) input here, got 3-D"]),
    (["1,3,8,8", "1,3,8,8"], ["the model does not run on input shape 1,3,8,8 1,3,8,8", "TypeError"]),
])
def test_an_absurd_input_shape_is_one_line(models_dir, monkeypatch, shapes, fragments):
    monkeypatch.setattr(export_mod, "available_memory", lambda: 1 << 30)  # 1 GiB: 1,3,8192,8192 does not fit
    before = snapshot(models_dir)
    args = [a for shape in shapes for a in ("--input-shape", shape)]
    assert_one_error_line(*invoke_export("more_netdefs:net", *args, "-o", "out/m", cwd=models_dir),
                          "npuopt-export", *fragments)
    assert snapshot(models_dir) == before


@pytest.mark.parametrize("model, fragments", [
    ("exits_at_import:net", ["model 'exits_at_import:net'", "importing exits_at_import failed",
                             "sys.exit(3) in ", "exits_at_import.py:3"]),
    ("imports_an_exiting_helper:net", ["importing imports_an_exiting_helper failed", "sys.exit(4) in ",
                                       "exiting_helper.py:2"]),
    ("more_netdefs:exits_in_factory", ["calling exits_in_factory() failed", "sys.exit('no licence')"]),
    ("more_netdefs:exits_in_forward", ["the model does not run on input shape 1,3,8,8", "sys.exit(5)"]),
])
def test_a_model_module_that_calls_sys_exit_is_one_line(models_dir, model, fragments):
    """Run as a user runs it, in a process of its own: a SystemExit that escaped would end it
    silently, with the model's exit code."""
    before = snapshot(models_dir)
    run = subprocess.run([sys.executable, "-m", "npuopt_export.export", model, "--input-shape", "1,3,8,8",
                          "-o", "out/m"], cwd=models_dir, capture_output=True, text=True, timeout=300)
    assert_one_error_line(run.returncode, run.stdout, run.stderr, "npuopt-export", *fragments)
    assert snapshot(models_dir) == before


# ---- 5. header lines npuopt does not know ------------------------------------------------------
UNKNOWN_HEADER = ["producer=Compass Unified Parser 1.3", "my_tool_flags=[1,2,3]", "checked=true"]


@pytest.fixture(scope="module")
def quantized_with_unknown_header(tmp_path_factory):
    """A float IR whose header has lines npuopt does not know (and the parser's float markers,
    between them), quantized by `npuopt --cfg`: (the quantized .txt, calibration samples)."""
    folder = tmp_path_factory.mktemp("header")
    txt = write_tiny_ir(folder / "ir")
    lines = txt.read_text(encoding="utf-8").split("\n")
    lines[1:1] = [UNKNOWN_HEADER[0], "compat_quantized_model=false"]
    lines[5:5] = ["precision=float32", "model_bin=./tiny.bin", *UNKNOWN_HEADER[1:]]
    txt.write_text("\n".join(lines), encoding="utf-8")
    samples = np.random.default_rng(0).standard_normal((8, 6, 6, 2)).astype(np.float32)
    np.save(folder / "x.npy", samples)
    cfg = write_cfg(folder / "opt.cfg", graph=txt, output_dir=folder / "out", dataset="NumpyDataset",
                    calibration_data=folder / "x.npy", calibration_batch_size=4, device="cpu",
                    global_calibration="none")
    result = run_in_process("--cfg", cfg)
    assert result.exit_code == 0, result.stderr
    return folder / "out" / "tiny_o.txt", samples


def test_unknown_header_lines_are_kept_in_the_quantized_ir(quantized_with_unknown_header):
    out, _ = quantized_with_unknown_header
    header = out.read_text(encoding="utf-8").split("\n\n")[0].split("\n")
    assert header == ["model_name=tiny", "layer_number=4", "input_tensors=[x]", "output_tensors=[prob]",
                      UNKNOWN_HEADER[0], "model_bin=./tiny_o.bin", *UNKNOWN_HEADER[1:]]
    # the float markers would make the tool chain read it as float; model_bin names the file written beside it
    graph = read_graph(str(out))
    assert graph.quantized and dict(graph.header) == {"producer": "Compass Unified Parser 1.3",
                                                      "model_bin": "./tiny_o.bin",
                                                      "my_tool_flags": [1, 2, 3], "checked": True}
    model = read_model(str(out))  # npuopt-run's reader, written from the format's documentation alone
    assert model.header["producer"] == "Compass Unified Parser 1.3" and model.header["my_tool_flags"] == [1, 2, 3]


def test_the_tool_chains_reader_reads_the_quantized_ir_with_unknown_header_lines(quantized_with_unknown_header,
                                                                                  opt_root, tmp_path):
    """OPT's OptForward reads every layer as quantized and computes what npuopt computes."""
    from opt_oracle import OptJob, Oracle
    out, samples = quantized_with_unknown_header
    np.save(tmp_path / "x.npy", samples[:1])
    result = Oracle(opt_root, tmp_path).forward([OptJob(out, out.with_suffix(".bin"), [tmp_path / "x.npy"],
                                                        tmp_path / "opt.npz")])[0]
    assert result.errors == [] and all(result.quantized.values()), result
    ours = read_graph(str(out)).forward([torch.from_numpy(samples[:1])])[0]
    assert np.array_equal(ours.numpy(), result.outputs[0])
