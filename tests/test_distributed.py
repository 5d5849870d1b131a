"""Data-parallel runs (torchrun, gloo, one thread per rank): the files and the report's
figures equal one process's, whatever the number of ranks; a rank that fails or is
killed ends the job with one error line naming it, and no output."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_DATA, write_cfg

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn"
FILES = ("tiny_cnn_o.txt", "tiny_cnn_o.bin", "tiny_cnn_opt_template.json")
RUN_ONLY = ("quantized_ir", "opt_template", "seconds")  # where the report may differ: paths and time


def run(cfg: Path, ranks: int, env: dict = None, timeout: int = 300):
    """(exit code, stderr, seconds) of npuopt on `cfg`: one process, or torchrun with `ranks` ranks."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] \
        if ranks > 1 else [sys.executable]
    started = time.perf_counter()
    done = subprocess.run([*launcher, "-m", "npuopt", "--cfg", str(cfg)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return done.returncode, done.stderr, time.perf_counter() - started


def tiny_cfg(path: Path, out: Path, **fields) -> Path:
    values = dict(graph=EXAMPLE / "tiny_cnn.txt", model_name="tiny_cnn", output_dir=out, dataset="NumpyDataset",
                  calibration_data=EXAMPLE / "data.npy", calibration_batch_size=40, data=EXAMPLE / "data.npy",
                  label=EXAMPLE / "labels.npy", metric="TopKMetric", metric_batch_size=16, device="cpu",
                  quantize_method_for_weight="per_tensor_symmetric_restricted_range")
    values.update(fields)
    return write_cfg(path, **values)


def same_run(one: Path, many: Path, files, report: str) -> None:
    for name in files:
        assert (one / name).read_bytes() == (many / name).read_bytes(), name
    a, b = (json.loads((d / report).read_text()) for d in (one, many))
    assert set(a) == set(b)
    assert {k: v for k, v in a.items() if k not in RUN_ONLY} == {k: v for k, v in b.items() if k not in RUN_ONLY}


@pytest.mark.parametrize("fields", [{}, {"global_calibration": "adaround"}], ids=["defaults", "adaround"])
def test_two_ranks_write_what_one_process_writes(tmp_path, fields):
    """3 calibration batches and 7 metric batches: the ranks hold unequal shares."""
    results = {}
    for ranks in (1, 2):
        cfg = tiny_cfg(tmp_path / f"{ranks}.cfg", tmp_path / f"out{ranks}", **fields)
        code, err, _ = run(cfg, ranks)
        assert code == 0, err
        results[ranks] = tmp_path / f"out{ranks}"
    same_run(results[1], results[2], FILES, "tiny_cnn_report.json")
    report = json.loads((results[2] / "tiny_cnn_report.json").read_text())
    assert report["samples"] == 100 and report["metrics"]["quant"]
    if fields:
        assert report["global_calibration"] == ["adaround"]


@pytest.mark.skipif(not (SHARED_DATA / "parser_irs" / "transformer_encoder").is_dir(),
                    reason="needs ../shared/data/parser_irs")
def test_two_ranks_on_a_graph_that_runs_samples_one_by_one(tmp_path):
    """The parser's transformer IR fixes batch 1, so it runs a batch one sample at a time;
    calibration's units are still the batches (7 samples in batches of 3: rank 1 has no
    batch in the last step), and a batch's statistics are the whole batch's."""
    folder = SHARED_DATA / "parser_irs" / "transformer_encoder"
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((7, 16, 128)).astype(np.float32))
    for ranks in (1, 2):
        cfg = write_cfg(tmp_path / f"{ranks}.cfg", graph=folder / "transformer_encoder.txt", model_name="enc",
                        output_dir=tmp_path / f"out{ranks}", dataset="NumpyDataset", calibration_data=data,
                        calibration_batch_size=3, device="cpu",
                        quantize_method_for_weight="per_tensor_symmetric_restricted_range")
        code, err, _ = run(cfg, ranks)
        assert code == 0, err
    same_run(tmp_path / "out1", tmp_path / "out2", ("enc_o.txt", "enc_o.bin", "enc_opt_template.json"),
             "enc_report.json")


PLUGIN = '''
import os, signal, sys
import numpy as np
from torch.utils.data import Dataset
from npuopt.framework import PluginType, register_plugin

DATA = np.load({data!r})


@register_plugin(PluginType.Dataset, "1.0")
class RankFailsDataset(Dataset):
    """The example's samples; on rank 1, sample 70 (unit 7, rank 1's) kills the process or raises."""

    def __init__(self, data_file, label_file=None):
        self.mode = open(data_file).read().strip()

    def __len__(self):
        return len(DATA)

    def __getitem__(self, i):
        if os.environ.get("RANK") == "1" and i == 70:
            if self.mode == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("sample 70 is unreadable")
        return DATA[i]
'''


@pytest.mark.parametrize("mode, said", [("killed", "rank 1 (pid "), ("raises", "rank 1: ")])
def test_a_rank_that_dies_or_fails_ends_the_job_with_one_line_and_no_output(tmp_path, mode, said):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "rank_fails.py").write_text(PLUGIN.format(data=str(EXAMPLE / "data.npy")))
    (tmp_path / "mode.txt").write_text(mode)
    out = tmp_path / "out"
    cfg = tiny_cfg(tmp_path / "opt.cfg", out, dataset="RankFailsDataset", calibration_data=tmp_path / "mode.txt",
                   data="", label="", metric="", calibration_batch_size=10)
    code, err, seconds = run(cfg, 2, env={"AIPUPLUGIN_PATH": str(plugins)}, timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("npuopt: error:")]
    assert code != 0 and seconds < 60, err
    assert len(lines) == 1 and said in lines[0], err
    if mode == "raises":
        assert "sample 70 is unreadable" in lines[0] and "rank_fails.py" in lines[0], err
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))
