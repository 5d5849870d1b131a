"""npuopt-run streams (issue 23): inputs read and outputs written batch by batch, results
independent of --batch-size, tensors dropped after their last reader; and bad input (a
float IR, a broken input scale, complex data, unusable -o/--dump paths) ends in one error
line naming the culprit, exit status 1 and nothing written. The quantized IR is
examples/tiny_cnn quantized by npuopt (input 'input' [1, 12, 12, 3], 100 samples)."""
import json
import os
import weakref
from pathlib import Path

import numpy as np
import pytest

from npuopt_run import cli
from npuopt_run.irfile import read_model
from npuopt_run.runner import Runner
from npuopt_run.stream import Column

from conftest import REPO, edit_ir, run_cfg

EXAMPLE = REPO / "examples" / "tiny_cnn"
DATA = EXAMPLE / "data.npy"


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> Path:
    """tiny_cnn quantized by npuopt: the graph file of its quantized IR."""
    folder = tmp_path_factory.mktemp("tiny_cnn_q")
    run_cfg(folder / "opt.cfg", graph=EXAMPLE / "tiny_cnn.txt", bin=EXAMPLE / "tiny_cnn.bin", model_name="tiny_cnn",
            output_dir=folder / "out", dataset="NumpyDataset", calibration_data=DATA, calibration_batch_size=16,
            device="cpu")
    return folder / "out" / "tiny_cnn_o.txt"


@pytest.fixture
def ir(quantized, tmp_path) -> Path:
    """A copy of the quantized IR that a test may edit."""
    folder = tmp_path / "ir"
    folder.mkdir()
    for suffix in (".txt", ".bin"):
        (folder / ("tiny_cnn_o" + suffix)).write_bytes(quantized.with_suffix(suffix).read_bytes())
    return folder / "tiny_cnn_o.txt"


def run_cli(*argv) -> int:
    """cli.main in this process; its exit status."""
    try:
        cli.main([str(a) for a in argv])
    except SystemExit as e:
        return e.code
    return 0


def tree(folder: Path) -> dict:
    """Every file under `folder` (hidden ones included) with its size."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))}


def expect_error(capsys, folder: Path, argv, *words) -> str:
    """The run ends with one `npuopt-run: error:` line holding `words`, exit status 1, no
    traceback, and `folder` as it was."""
    before = tree(folder)
    capsys.readouterr()
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("npuopt-run: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    assert tree(folder) == before
    return err


# ------------------------------------------------------------------------ streaming
def test_batch_sizes_give_the_same_files(ir, tmp_path):
    """Batches of 1, 7 (not dividing the 100 samples), 100 and the --batch alias: the same
    output arrays and the same dump, file for file."""
    runs = {}
    for size, option in ((1, "--batch-size"), (7, "--batch-size"), (100, "--batch-size"), (32, "--batch")):
        out, dump = tmp_path / f"out{size}.npz", tmp_path / f"dump{size}"
        assert run_cli(ir, "--input", DATA, "-o", out, "--dump", dump, option, size) == 0
        runs[size] = out, dump
    want_out, want_dump = runs[1]
    index = json.loads((want_dump / "index.json").read_text())
    with np.load(want_out) as want:
        assert sorted(want) == ["prob", "prob.float"]
        assert want["prob"].shape == (100, 4) and want["prob"].dtype == np.uint8
        assert want["prob.float"].dtype == np.float32
    assert len(index) == 13 and np.load(want_dump / index["input"]).shape == (100, 12, 12, 3)
    for size, (out, dump) in runs.items():
        with np.load(out) as got, np.load(want_out) as want:
            assert sorted(got) == sorted(want)
            for key in want:
                assert got[key].dtype == want[key].dtype
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key}, batch size {size}")
        assert json.loads((dump / "index.json").read_text()) == index
        for fname in index.values():
            got, want = np.load(dump / fname), np.load(want_dump / fname)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=f"{fname}, batch size {size}")


def test_outputs_are_written_as_the_batches_go(ir, tmp_path, monkeypatch):
    """After every batch the files being written (in a temporary folder beside OUT.npz and
    DIR) have grown; OUT.npz and DIR appear only after the last batch."""
    sizes = []
    stream = Runner.stream

    def watched(self, inputs, wanted, sink):
        stream(self, inputs, wanted, sink)
        assert not (tmp_path / "out.npz").exists() and not (tmp_path / "dump").exists()
        sizes.append(sum(tree(tmp_path).values()))

    monkeypatch.setattr(Runner, "stream", watched)
    argv = [ir, "--input", DATA, "-o", tmp_path / "out.npz", "--dump", tmp_path / "dump", "--batch-size", 10]
    assert run_cli(*argv) == 0
    assert len(sizes) == 10 and all(a < b for a, b in zip(sizes, sizes[1:])), sizes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "ir", "out.npz"]  # no temporary left


def test_tensors_are_dropped_after_their_last_reader(ir):
    """While a batch runs, only the tensors still to be read are alive, and none after it."""
    runner = Runner(read_model(str(ir)))
    x = runner.prepare_inputs([np.load(DATA)[:8]], integer_input=False)
    refs, alive = [], []

    def sink(name, value):
        refs.append(weakref.ref(value))
        alive.append(sum(r() is not None for r in refs))

    runner.stream(x, set(runner.infos), sink)
    # the input, which the caller holds, and at most three more (at branch_b: add, branch_a, branch_b)
    assert len(refs) == 13 and max(alive) == 4, alive
    del x
    assert all(r() is None for r in refs)


def test_a_column_appends_rows_and_writes_one_npy(tmp_path):
    column = Column("t", str(tmp_path / "t.raw"), np.int8)
    parts = [np.full((n, 2, 3), n, np.int64) for n in (2, 1, 3)]
    for i, part in enumerate(parts):
        column.append(part)
        assert (tmp_path / "t.raw").stat().st_size == sum(p.size for p in parts[:i + 1])
    with open(tmp_path / "t.npy", "wb") as f:
        column.write_npy(f)
    got = np.load(tmp_path / "t.npy")
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.concatenate(parts))
    assert not (tmp_path / "t.raw").exists()


# ------------------------------------------------------------------------ bad input
def test_a_float_ir_is_refused(capsys, tmp_path):
    expect_error(capsys, tmp_path, [EXAMPLE / "tiny_cnn.txt", "--input", DATA, "-o", tmp_path / "out.npz",
                                    "--dump", tmp_path / "dump"],
                 "tiny_cnn.txt", "not a quantized IR")


@pytest.mark.parametrize("scale", ["0.0", "-45.8", "nan", "inf"])
def test_a_broken_input_scale_is_refused(capsys, ir, tmp_path, scale):
    line = edit_ir(ir, "input", "layer_top_scale", f"[{scale}]")
    expect_error(capsys, tmp_path, [ir, "--input", DATA, "-o", tmp_path / "out.npz", "--dump", tmp_path / "dump"],
                 f"tiny_cnn_o.txt:{line}:", "layer 'input'", "layer_top_scale", "positive finite")


def test_complex_input_is_refused(capsys, ir, tmp_path):
    np.save(tmp_path / "c.npy", np.load(DATA)[:4].astype(np.complex64))
    expect_error(capsys, tmp_path, [ir, "--input", tmp_path / "c.npy", "-o", tmp_path / "out.npz",
                                    "--dump", tmp_path / "dump"],
                 "c.npy", "input 'input'", "complex64")


def test_a_dump_path_that_is_a_file_is_refused(capsys, ir, tmp_path):
    (tmp_path / "dump").write_text("a file")
    expect_error(capsys, tmp_path, [ir, "--input", DATA, "-o", tmp_path / "out.npz", "--dump", tmp_path / "dump"],
                 f"--dump '{tmp_path / 'dump'}'", "existing file")


@pytest.mark.parametrize("where, words", [
    ("missing/out.npz", ["missing", "does not exist"]),
    ("a_file/out.npz", ["a_file", "is not a folder"]),
    ("a_folder", ["a_folder", "is a folder"]),
])
def test_an_unusable_output_path_is_refused_before_the_run(capsys, ir, tmp_path, monkeypatch, where, words):
    (tmp_path / "a_file").write_text("a file")
    (tmp_path / "a_folder").mkdir()
    monkeypatch.setattr(Runner, "stream", lambda *a: pytest.fail("the run started"))
    expect_error(capsys, tmp_path, [ir, "--input", DATA, "-o", tmp_path / where], "-o", *words)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes in any folder")
def test_an_output_folder_that_is_not_writable_is_refused_before_the_run(capsys, ir, tmp_path, monkeypatch):
    (tmp_path / "locked").mkdir()
    os.chmod(tmp_path / "locked", 0o555)
    monkeypatch.setattr(Runner, "stream", lambda *a: pytest.fail("the run started"))
    try:
        expect_error(capsys, tmp_path, [ir, "--input", DATA, "-o", tmp_path / "locked" / "out.npz"],
                     "locked", "cannot write")
    finally:
        os.chmod(tmp_path / "locked", 0o755)


def test_a_failure_in_a_late_batch_leaves_nothing(capsys, ir, tmp_path):
    """--integer-input with a value out of int8 range in the last samples: the batches
    before it were written to temporary files, and those are gone."""
    q = np.zeros((30, 12, 12, 3), np.int16)
    q[27, 0, 0, 0] = 300
    np.save(tmp_path / "q.npy", q)
    expect_error(capsys, tmp_path, [ir, "--input", tmp_path / "q.npy", "--integer-input", "-o", tmp_path / "out.npz",
                                    "--dump", tmp_path / "dump", "--batch-size", 4],
                 "input 'input'", "300")


def test_a_batch_size_below_one_is_refused(capsys, ir, tmp_path):
    expect_error(capsys, tmp_path, [ir, "--input", DATA, "-o", tmp_path / "out.npz", "--batch-size", 0],
                 "--batch-size", "0")
