"""Issue 4, point 5: bad input data stops `npuopt --cfg` with one error line naming the
culprit, and leaves no IR behind (nothing half-written, and, since data and labels are
checked before calibration, no IR at all). Runs go through the CLI in this process on
examples/tiny_cnn (input 'input' [1, 12, 12, 3], 100 samples, 4 classes).

Policies checked here (docs/datasets-metrics.md, "What a dataset may yield"):
- integer data for a float input is accepted and converted to float with its values
  unchanged; bool, complex, text and Python objects are errors;
- NaN/Inf in calibration data: a warning names each tensor that has them; they are left
  out of its statistics, and the run goes on.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import npuopt.quant.calibration as calibration_mod
from npuopt.config import load_config
from npuopt.datasets_common import no_label
from npuopt.framework import Dataset, PluginType, register_plugin
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins

from conftest import REPO, run_in_process, write_cfg

EXAMPLE = REPO / "examples" / "tiny_cnn"
DATA = np.load(EXAMPLE / "data.npy")
LABELS = np.load(EXAMPLE / "labels.npy")


@register_plugin(PluginType.Dataset, "1.0")
class BadInputTestDataset(Dataset):
    """Eight samples; the data file holds one word saying what goes wrong."""

    def __init__(self, data_file, label_file=None):
        self.mode = Path(data_file).read_text().strip()

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if self.mode == "raise" and i == 5:
            raise ValueError(f"sample {i}: cannot decode\nsecond line of the message")
        if self.mode == "text":
            return "a picture of a cat", no_label()
        if self.mode == "numpy_text":
            return np.full((12, 12, 3), "x"), no_label()
        if self.mode == "objects":
            return np.array([object()] * 3), no_label()
        if self.mode == "ragged":
            return np.zeros((12, 12 if i < 3 else 11, 3), np.float32), no_label()
        return DATA[i], no_label()


def cfg_fields(tmp_path, **fields):
    values = dict(graph=EXAMPLE / "tiny_cnn.txt", model_name="tiny_cnn", output_dir=tmp_path / "out",
                  dataset="NumpyDataset", calibration_data=EXAMPLE / "data.npy", calibration_batch_size=16,
                  data=EXAMPLE / "data.npy", label=EXAMPLE / "labels.npy", metric_batch_size=16,
                  metric="TopKMetric", device="cpu", quantize_method_for_activation="per_tensor_asymmetric")
    values.update(fields)
    return values


def npy(tmp_path, name, array) -> Path:
    path = tmp_path / name
    np.save(path, array)
    return path


def word(tmp_path, mode) -> Path:
    path = tmp_path / f"{mode}.txt"
    path.write_text(mode)
    return path


def run_cli(tmp_path, **fields):
    cfg = write_cfg(tmp_path / "opt.cfg", **cfg_fields(tmp_path, **fields))
    return run_in_process("--cfg", cfg)


def assert_fails_cleanly(tmp_path, result, *fragments) -> str:
    """Exit 1; the last line of stderr, and the only error line, starts with
    `npuopt: error:`, names every fragment; no traceback; no IR file in output_dir."""
    report = f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.exit_code == 1, report
    assert "Traceback" not in result.stderr + result.stdout, report
    lines = result.stderr.rstrip("\n").split("\n")
    errors = [line for line in lines if "npuopt: error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1] and errors[0].startswith("npuopt: error: "), report
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in the error line\n{report}"
    out = tmp_path / "out"
    left = [p for p in os.listdir(out) if "_o." in p or p.endswith(".tmp")] if out.is_dir() else []
    assert left == [], f"IR files left behind: {left}"
    return errors[0]


# ---- shapes ----------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_calibration_data_of_the_wrong_shape(tmp_path, workers):
    bad = npy(tmp_path, "bad.npy", DATA[:, :5])
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, calibration_data=bad, dataloader_workers=workers),
                         "dataset 'NumpyDataset' yields shape [5, 12, 3] per sample for input 'input'; "
                         "the IR says [12, 12, 3]")


def test_metric_data_of_the_wrong_shape_stops_before_calibration(tmp_path, monkeypatch):
    calibrated = []
    monkeypatch.setattr(calibration_mod.Calibrator, "run", lambda self, b: calibrated.append(1))
    bad = npy(tmp_path, "bad.npy", DATA[:, :, :, :2])
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, data=bad),
                         "yields shape [12, 12, 2] per sample for input 'input'")
    assert calibrated == []


def test_samples_of_different_shapes_in_one_batch(tmp_path):
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, dataset="BadInputTestDataset",
                                           calibration_data=word(tmp_path, "ragged"), data="", label=""),
                         "dataset 'BadInputTestDataset' yields samples that cannot be stacked into a batch",
                         "[12, 12, 3] at entry 0 and [12, 11, 3] at entry 3")


# ---- dtypes ----------------------------------------------------------------------------
def test_integer_data_is_accepted_and_converted_unchanged(tmp_path):
    """The same values as int16 and as float32 give the same quantized IR and metrics."""
    values = np.round(DATA * 20).clip(-300, 300)
    runs = {}
    for dtype in (np.int16, np.float32):
        folder = tmp_path / np.dtype(dtype).name
        path = npy(tmp_path, f"{np.dtype(dtype).name}.npy", values.astype(dtype))
        folder.mkdir()
        result = run_cli(folder, calibration_data=path, data=path)
        assert result.exit_code == 0, result.stderr
        runs[dtype] = folder / "out"
    ints, floats = runs[np.int16], runs[np.float32]
    assert (ints / "tiny_cnn_o.bin").read_bytes() == (floats / "tiny_cnn_o.bin").read_bytes()
    assert (ints / "tiny_cnn_o.txt").read_text() == (floats / "tiny_cnn_o.txt").read_text()
    reports = [json.loads((d / "tiny_cnn_report.json").read_text()) for d in (ints, floats)]
    assert reports[0]["metrics"] == reports[1]["metrics"]


@pytest.mark.parametrize("array, fragments", [
    (DATA > 0, ["dataset 'NumpyDataset' yields torch.bool values for input 'input'; expected real numbers"]),
    (DATA.astype(np.complex64), ["NumpyDataset: data file '", "bad.npy' has dtype complex64; expected numbers"]),
    (DATA.astype(str), ["NumpyDataset: data file '", "bad.npy' has dtype <U", "expected numbers"]),
    (np.array([None] * 100, dtype=object), ["NumpyDataset: data file '", "bad.npy' holds Python objects"]),
])
def test_data_that_is_not_real_numbers(tmp_path, array, fragments):
    bad = npy(tmp_path, "bad.npy", array)
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, calibration_data=bad), *fragments)


@pytest.mark.parametrize("mode, fragment", [
    ("text", "dataset 'BadInputTestDataset' yields text (str) as samples, not arrays of numbers"),
    ("numpy_text", "dataset 'BadInputTestDataset' yields values of type <U1; a sample must be arrays or tensors "
                   "of numbers"),
    ("objects", "dataset 'BadInputTestDataset' yields values of type object; a sample must be arrays"),
])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_yielding_text_or_objects(tmp_path, mode, fragment, workers):
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, dataset="BadInputTestDataset", data="", label="",
                                           calibration_data=word(tmp_path, mode), dataloader_workers=workers),
                         fragment)


# ---- errors inside the dataset, in this process or in DataLoader workers --------------------
@pytest.mark.parametrize("workers, where", [(0, ""), (2, " (worker process ")])
def test_an_exception_in_the_dataset_is_one_line(tmp_path, workers, where):
    line = assert_fails_cleanly(
        tmp_path, run_cli(tmp_path, dataset="BadInputTestDataset", data="", label="", calibration_batch_size=4,
                          calibration_data=word(tmp_path, "raise"), dataloader_workers=workers),
        f"dataset 'BadInputTestDataset' failed while loading a batch{where}",
        "ValueError: sample 5: cannot decode second line of the message")
    assert "Original Traceback" not in line and "File " not in line


def test_a_dataset_error_in_a_worker_keeps_its_message(tmp_path):
    """DatasetErrors a built-in dataset raises in a worker (an image that cannot be read)
    come back as the same one line they are without workers."""
    from PIL import Image
    (tmp_path / "img").mkdir()
    Image.fromarray(np.zeros((12, 12, 3), np.uint8)).save(tmp_path / "img" / "ok.png")
    (tmp_path / "img" / "broken.png").write_bytes(b"not a png")
    (tmp_path / "labels.tsv").write_text("file\tlabel\nimg/ok.png\t1\nimg/broken.png\t2\n")
    lines = []
    for workers in (0, 2):
        folder = tmp_path / f"w{workers}"
        folder.mkdir()
        lines.append(assert_fails_cleanly(
            folder, run_cli(folder, dataset="ImageFolderDataset", calibration_data=tmp_path / "labels.tsv",
                            data="", label="", dataloader_workers=workers), "broken.png"))
    assert lines[0] == lines[1]


# ---- empty sets, NaN/Inf ---------------------------------------------------------------
def test_empty_calibration_set(tmp_path):
    empty = npy(tmp_path, "empty.npy", np.zeros((0, 12, 12, 3), np.float32))
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, calibration_data=empty),
                         "dataset 'NumpyDataset' on '", "empty.npy' is empty")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nonfinite_calibration_values_warn_and_are_left_out(tmp_path, monkeypatch, value):
    seen = []
    monkeypatch.setattr(calibration_mod, "OPT_WARN", lambda msg, *a: seen.append(msg))
    data = DATA.copy()
    data[3, 1, 2, 0] = data[40, 0, 0, 1] = value
    path = npy(tmp_path, "bad.npy", data)
    load_plugins()
    master = OptMaster(load_config(str(write_cfg(tmp_path / "opt.cfg", **cfg_fields(tmp_path,
                                                                                   calibration_data=path)))))
    report = master.run()
    # -Inf is an attention mask's value (statistics.MASKED): left out of the input's statistics
    # silently; the NaN/Inf it makes in the layers after it are warned about there
    masked = value == -np.inf
    warned = "input" if not masked else "conv1"
    assert any(m.startswith(f"calibration: tensor '{warned}' (layer ") and "NaN/Inf" in m and "left out" in m
               for m in seen), seen
    stats = master.graph.tensor("input").statistics
    finite = data[np.isfinite(data)]
    assert (stats.nonfinite, stats.masked) == ((0, 2) if masked else (2, 0)) and stats.count == finite.size
    assert stats.min == pytest.approx(float(finite.min())) and stats.max == pytest.approx(float(finite.max()))
    assert Path(report["quantized_ir"]).is_file()
    # the quantized Input maps NaN to 0, +Inf to qmax and -Inf to qmin
    t = master.qgraph.input_tensors[0]
    x = torch.from_numpy(data[:4].copy())
    master.qgraph.forward([x], keep_tensors=True)
    q = t.betensor
    want = {"nan": 0, "inf": t.dtype.qmax, "-inf": t.dtype.qmin}[str(value)]
    assert int(q[3, 1, 2, 0]) == want


# ---- labels that do not fit the metric -----------------------------------------------------
@pytest.mark.parametrize("labels, fields, fragments", [
    (LABELS[:97], {}, ["NumpyDataset: label file '", "labels.npy' has 97 labels for 100 samples"]),
    (np.stack([LABELS, LABELS], 1), {}, ["TopKMetric: expected one class index per sample; got labels of "
                                        "shape [16, 2] for a batch of 16"]),
    (LABELS + 10, {}, ["TopKMetric: labels must be class indices in [0, 4), got values from"]),
    (LABELS + 0.5, {}, ["TopKMetric: labels must be integer class indices; got non-integer values"]),
    (np.zeros((100, 3)), {"metric": "CosDistanceMetric"},
     ["CosDistanceMetric: reference outputs of shape [16, 3] do not fit output 0 of shape [16, 4]"]),
    (None, {}, ["TopKMetric: the dataset gave no labels; set the cfg field 'label'"]),
])
def test_labels_that_do_not_fit_the_metric_stop_before_calibration(tmp_path, monkeypatch, labels, fields,
                                                                    fragments):
    calibrated = []
    monkeypatch.setattr(calibration_mod.Calibrator, "run", lambda self, b: calibrated.append(1))
    label = npy(tmp_path, "labels.npy", labels) if labels is not None else ""
    assert_fails_cleanly(tmp_path, run_cli(tmp_path, label=label, **fields), *fragments)
    assert calibrated == []
