"""Issue 46, the last bad inputs of the hidden corpus, run as a user runs the commands:
each stops with one error line naming the culprit, a non-zero exit, no traceback and
nothing written (the case's folder is as it was before the run).

1. npuopt-run on a quantized IR whose graph input states a layer_top_scale of 0, NaN, or
   a number that is 0 or infinite as the float32 it quantizes with;
2. npuopt-export -o a path under a regular file (or a prefix that ends in a separator);
3. a graph input of the wrong rank: named with its shape, the IR file and the data that
   feeds it, not only as the first layer that reads it; data of the wrong rank names the
   data file.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_one_line_error, edit_ir, invoke_export, run_in_process, start_npuopt, write_cfg

EXAMPLE = REPO / "examples" / "tiny_cnn"


def listing(folder: Path) -> dict:
    """Every file under `folder` with its bytes: what a failed run must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def assert_one_line(result: subprocess.CompletedProcess, prog: str, *fragments: str) -> str:
    report = f"rc={result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), report
    assert "Traceback" not in result.stdout + result.stderr, report
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in the error line\n{report}"
    return lines[0]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> Path:
    """The example model quantized by npuopt (opt.cfg.example), and 4 of its samples."""
    folder = tmp_path_factory.mktemp("quantized")
    result = run_in_process("--cfg", REPO / "opt.cfg.example", "--set", f"output_dir={folder}", "--set", "data=")
    assert result.exit_code == 0, result.output
    np.save(folder / "x.npy", np.load(EXAMPLE / "data.npy")[:4])
    return folder


@pytest.mark.parametrize("scale, shown", [("[0]", "0"), ("[nan]", "nan"), ("[0.0]", "0.0"),
                                          ("[1e-50]", "0.0 in float32"), ("[1e40]", "inf in float32")])
def test_npuopt_run_refuses_an_input_scale_that_quantizes_to_nothing(tmp_path, quantized, scale, shown):
    shutil.copy(quantized / "tiny_cnn_o.bin", tmp_path / "m_o.bin")
    shutil.copy(quantized / "tiny_cnn_o.txt", tmp_path / "m_o.txt")
    shutil.copy(quantized / "x.npy", tmp_path / "x.npy")
    line = edit_ir(tmp_path / "m_o.txt", "input", "layer_top_scale", scale)
    before = listing(tmp_path)
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", "m_o.txt", "--input", "x.npy", "-o", "out.npz"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert_one_line(result, "npuopt-run", f"m_o.txt:{line}", "graph input 'input'", "layer_top_scale", shown)
    assert listing(tmp_path) == before


def test_npuopt_run_refuses_a_scale_on_a_float_graph_input(tmp_path):
    """A float input states no scale (npuopt writes none); one of 0 is a broken IR, refused
    like a quantized input's."""
    out = tmp_path / "q"
    result = run_in_process("--cfg", REPO / "opt.cfg.example", "--set", f"output_dir={out}", "--set", "data=",
                            "--set", "quant_type=w8afp16")
    assert result.exit_code == 0, result.output
    txt = out / "tiny_cnn_o.txt"
    lines = txt.read_text(encoding="utf-8").split("\n")
    lines.insert(lines.index("layer_top_type=[float16]") + 1, "layer_top_scale=[0]")
    txt.write_text("\n".join(lines), encoding="utf-8")
    np.save(tmp_path / "x.npy", np.load(EXAMPLE / "data.npy")[:2])
    before = listing(tmp_path)
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", str(txt), "--input", "x.npy", "-o", "out.npz"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert_one_line(result, "npuopt-run", "graph input 'input'", "layer_top_scale 0")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("prefix, fragments", [
    ("afile/m", ["'afile/m.txt' cannot be created", "afile' is a file, not a folder"]),
    ("afile/sub/m", ["'afile/sub/m.txt' cannot be created", "afile' is a file, not a folder"]),
    ("folder/", ["'folder/' names a folder"]),
])
def test_npuopt_export_refuses_an_output_it_cannot_write_before_any_work(tmp_path, prefix, fragments):
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "folder").mkdir()
    before = listing(tmp_path)
    code, stdout, stderr = invoke_export("torchvision:squeezenet1_1", "--input-shape", "1,3,32,32", "-o", prefix,
                                         cwd=tmp_path)
    result = subprocess.CompletedProcess([], code, stdout, stderr)
    line = assert_one_line(result, "npuopt-export", *fragments)
    assert "internal error" not in line
    assert listing(tmp_path) == before


def test_a_graph_input_of_the_wrong_rank_is_named_with_its_data(tmp_path):
    """The IR's input says [12, 12, 3] (no batch axis) and its data agrees: the convolution
    that reads it cannot run, and the line names the graph input, the IR and the data."""
    shutil.copytree(EXAMPLE, tmp_path / "m")
    txt = tmp_path / "m" / "tiny_cnn.txt"
    txt.write_text(txt.read_text(encoding="utf-8").replace("[1,12,12,3]", "[12,12,3]"), encoding="utf-8")
    np.save(tmp_path / "m" / "data3.npy", np.load(EXAMPLE / "data.npy")[:, 0])
    cfg = write_cfg(tmp_path / "opt.cfg", graph=txt, model_name="tiny_cnn", output_dir=tmp_path / "out",
                    dataset="NumpyDataset", calibration_data=tmp_path / "m" / "data3.npy", device="cpu")
    before = listing(tmp_path)
    result = start_npuopt("--cfg", cfg, cwd=tmp_path).result()
    assert_one_line_error(result, "graph input 'input'", str(txt), "[12, 12, 3] (3 axes)", "layer 'conv1'",
                          "calibration_data", "data3.npy", only_line=False)
    assert listing(tmp_path) == before


def test_data_of_the_wrong_rank_names_the_data_file(tmp_path):
    np.save(tmp_path / "data3.npy", np.load(EXAMPLE / "data.npy")[:, 0])
    cfg = write_cfg(tmp_path / "opt.cfg", graph=EXAMPLE / "tiny_cnn.txt", model_name="tiny_cnn",
                    output_dir=tmp_path / "out", dataset="NumpyDataset", calibration_data=tmp_path / "data3.npy",
                    device="cpu")
    before = listing(tmp_path)
    result = start_npuopt("--cfg", cfg, cwd=tmp_path).result()
    assert_one_line_error(result, "calibration_data", "data3.npy", "input 'input'", "[12, 3]", only_line=False)
    assert listing(tmp_path) == before
