"""Shared fixtures: the example IRs in ../shared/data, small IRs written into
tmp_path, the Compass Optimizer's reader as an oracle, and a runner for the `npuopt` command.

CLI runs are real subprocesses (the acceptance is about what a user sees on
stderr), started on a small thread pool so that a module can launch all of its
runs at once and each test waits only for its own.
"""
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))  # gen_op_tests and its op_cases/, scripts rather than a package
SHARED_DATA = REPO.parent / "shared" / "data"
IR_EXAMPLES = SHARED_DATA / "compass_ir_examples"
SQUEEZENET_BIN_BYTES = 4_993_696
TINY_CNN_CFG = REPO / "opt.cfg.example"

_POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))


# ---- data ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def ir_examples() -> Path:
    if not IR_EXAMPLES.is_dir():
        pytest.skip(f"example IRs absent: {IR_EXAMPLES} (../shared/data beside the checkout) does not exist")
    return IR_EXAMPLES


@pytest.fixture(scope="session")
def squeezenet(ir_examples, tmp_path_factory) -> Path:
    """squeezenet_s.txt beside a .bin of random float32 weights (the real one is not shipped)."""
    folder = tmp_path_factory.mktemp("squeezenet")
    txt = folder / "squeezenet_s.txt"
    shutil.copyfile(ir_examples / "squeezenet_s.txt", txt)
    weights = np.random.default_rng(0).standard_normal(SQUEEZENET_BIN_BYTES // 4, dtype=np.float32) * 0.05
    weights.astype("<f4").tofile(folder / "squeezenet_s.bin")
    return txt


@pytest.fixture(scope="session")
def opt_root(tmp_path_factory) -> Path:
    """The Compass Optimizer 4.2 extracted from ../shared/reference (the folder holding
    AIPUBuilder/ and its readme.md)."""
    from opt_oracle import OPT_TARBALL, extract_opt
    if not OPT_TARBALL.is_file():
        pytest.skip(f"the tool chain's reference is absent: {OPT_TARBALL} (../shared beside the checkout)")
    return extract_opt(tmp_path_factory.mktemp("opt"))


@pytest.fixture(scope="session")
def ported(opt_root, tmp_path_factory) -> Path:
    """The Compass Optimizer's plugin files ported with the documented rule: <folder>/plugins, <folder>/ops."""
    from port_opt_plugins import port
    dest = tmp_path_factory.mktemp("ported")
    port(opt_root / "AIPUBuilder" / "Optimizer", dest)
    return dest


@pytest.fixture(scope="session")
def oracle(opt_root, tmp_path_factory):
    """The Compass Optimizer's OptForward (opt_oracle.py) on the extracted reference."""
    from opt_oracle import OPT_REQUIREMENTS, Oracle
    for module in OPT_REQUIREMENTS:
        pytest.importorskip(module, reason=f"OPT needs '{module}' (pip install -e '.[test]')")
    return Oracle(opt_root, tmp_path_factory.mktemp("opt_runs"))


def write_tiny_ir(folder: Path, name: str = "tiny") -> Path:
    """A valid 4-layer float IR with constants: x -> conv (weights, biases) -> sig -> prob.

    Written by npuopt's own writer from a GraphBuilder graph, so the error tests
    start from a file that loads and break one thing at a time."""
    from npuopt.ir import write_graph
    from npuopt.ir.builder import GraphBuilder

    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder(name)
    b.input("x", [1, 6, 6, 2])
    conv_params = dict(kernel_x=3, kernel_y=3, stride_x=1, stride_y=1, pad_left=1, pad_right=1, pad_top=1,
                       pad_bottom=1, dilation_x=1, dilation_y=1, group=1, num_output=4, with_activation="NONE")
    b.layer("Convolution", "conv", ["x"], conv_params,
            {"weights": torch.randn(4, 3, 3, 2, generator=gen), "biases": torch.randn(4, generator=gen)})
    b.layer("Activation", "sig", ["conv"], {"method": "SIGMOID"})
    b.layer("Softmax", "prob", ["sig"], {"axis": -1})
    folder.mkdir(parents=True, exist_ok=True)
    txt = folder / f"{name}.txt"
    write_graph(b.build(["prob"]), str(txt))
    return txt


@pytest.fixture
def tiny_ir(tmp_path) -> Path:
    return write_tiny_ir(tmp_path / "ir")


def edit_ir(txt: Path, layer: Optional[str], key: str, value: Optional[str]) -> int:
    """Set `key` to the raw text `value` in the block of `layer` (None: the header),
    or delete the line when `value` is None. Returns the key's 1-based line number."""
    number = line_of(txt, layer, key)
    lines = txt.read_text(encoding="utf-8").split("\n")
    if value is None:
        del lines[number - 1]
    else:
        lines[number - 1] = f"{key}={value}"
    txt.write_text("\n".join(lines), encoding="utf-8")
    return number


def line_of(txt: Path, layer: Optional[str], key: str) -> int:
    """1-based line number of `key` in the block of `layer` (None: the header)."""
    lines = txt.read_text(encoding="utf-8").split("\n")
    start = 0 if layer is None else lines.index(f"layer_name={layer}")
    while start > 0 and lines[start - 1].strip():
        start -= 1
    for number in range(start + 1, len(lines) + 1):
        line = lines[number - 1]
        if not line.strip():
            break
        if line.split("=", 1)[0] == key:
            return number
    raise AssertionError(f"no key '{key}' in the block of layer {layer!r} of {txt}")


def npuopt_run_outputs(ir: Path, x: np.ndarray, folder: Path, *more: np.ndarray) -> dict:
    """`npuopt-run` (its entry point's module) on quantized IR `ir` with input `x` (and the
    graph's further inputs `more`): its outputs by name (the run must succeed)."""
    given = []
    for i, value in enumerate((x,) + more):
        given += ["-i", str(folder / f"x{i or ''}.npy")]
        np.save(given[-1], value)
    out = folder / "run.npz"
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", str(ir), *given,
                             "-o", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    with np.load(out) as outputs:
        return dict(outputs)


def write_cfg(path: Path, **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{k} = {v}\n" for k, v in fields.items())
    path.write_text("[Common]\n" + body, encoding="utf-8")
    return path


def transformer_encoder_cosine(tmp_path: Path, **fields):
    """The parser's transformer_encoder quantized with `fields` (64 calibration samples of
    N(0, std of its reference input)): (output cosine to float over 16 other samples, the
    quantized graph read back). Skips where ../shared is absent."""
    from npuopt.ir import read_graph
    folder = SHARED_DATA / "parser_irs" / "transformer_encoder"
    if not folder.is_dir():
        pytest.skip(f"parser IR absent: {folder}")
    ref = np.load(folder / "ref_input.npy")
    rng = np.random.default_rng(0)
    calib, val = (rng.standard_normal((n,) + ref.shape[1:]).astype(np.float32) * ref.std() for n in (64, 16))
    np.save(tmp_path / "calib.npy", calib)
    cfg = write_cfg(tmp_path / "opt.cfg", graph=folder / "transformer_encoder.txt", model_name="enc",
                    output_dir=tmp_path / "out", dataset="NumpyDataset", calibration_data=tmp_path / "calib.npy",
                    calibration_batch_size=16, device="cpu", **fields)
    result = run_in_process("--cfg", cfg)
    assert result.exit_code == 0, result.output[-2000:]
    float_graph = read_graph(str(folder / "transformer_encoder.txt"))
    quantized = read_graph(str(tmp_path / "out" / "enc_o.txt"))
    out = quantized.output_tensors[0]
    want = np.concatenate([float_graph.forward([torch.from_numpy(x[None])])[0].numpy().ravel() for x in val])
    got = np.concatenate([quantized.forward([torch.from_numpy(x[None])])[0].numpy().ravel()
                          for x in val]).astype(np.float64)
    if out.is_quantized:  # an integer or fp8 output, dequantized
        got = (got + float(out.zerop)) / float(out.scale)
    return float(want @ got / np.linalg.norm(want) / np.linalg.norm(got)), quantized


def run_cfg(path: Path, **fields):
    """The OptMaster of one whole run of the cfg written at `path` with `fields`."""
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    from npuopt.plugins import load_plugins
    load_plugins()
    master = OptMaster(load_config(str(write_cfg(path, **fields))))
    master.run()
    return master


def output_mse(master, graph_txt: Path, x: torch.Tensor):
    """(mean squared error of the run's quantized output against the float graph read
    from `graph_txt`, the float output), on input x."""
    from npuopt.ir import read_graph
    from npuopt.quant.compare import dequantized
    want = read_graph(str(graph_txt)).forward([x])[0]
    got = dequantized(master.qgraph.output_tensors[0], master.qgraph.forward([x])[0])
    return float(((got - want) ** 2).mean()), want


# ---- the command line ------------------------------------------------------------
def npuopt_env(plugin_path: Optional[Path] = None) -> dict:
    """The caller's environment without its AIPUPLUGIN_PATH, so runs see only the plugins a test gives."""
    env = dict(os.environ)
    env.pop("AIPUPLUGIN_PATH", None)
    if plugin_path is not None:
        env["AIPUPLUGIN_PATH"] = str(plugin_path)
    return env


def start_npuopt(*args, cwd: Path, plugin_path: Optional[Path] = None, timeout: int = 180) -> Future:
    """Start `python -m npuopt ARGS` in `cwd`; the future's result is the CompletedProcess."""
    command = [sys.executable, "-m", "npuopt", *map(str, args)]
    env = npuopt_env(plugin_path)
    return _POOL.submit(subprocess.run, command, cwd=str(cwd), env=env, capture_output=True, text=True,
                        timeout=timeout)


def error_lines(result: subprocess.CompletedProcess):
    return [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str, only_line: bool = True) -> str:
    """The run failed with exactly one `npuopt: error:` line naming every fragment and no
    traceback; with `only_line`, that line is all of stderr. Returns the line."""
    report = f"rc={result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode != 0, report
    assert "Traceback" not in result.stderr + result.stdout, report
    errors = error_lines(result)
    assert len(errors) == 1, report
    if only_line:
        assert result.stderr.splitlines() == errors, report
    else:
        assert result.stderr.rstrip("\n").splitlines()[-1] == errors[0], report
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in the error line\n{report}"
    return errors[0]


def assert_op_test_edit_stops_npuopt(tmp_path: Path, case: str, layer: str, key: str, value: str,
                                      message: str, **fields) -> None:
    """The op test `case` with `key` of `layer` set to `value`, through `npuopt --cfg` (in this
    process, more cfg `fields` given): one error line naming the layer and `message`, exit 1,
    no traceback, nothing written."""
    folder = REPO / "op_tests" / case
    for suffix in (".txt", ".bin"):
        shutil.copyfile(folder / f"{case}{suffix}", tmp_path / f"{case}{suffix}")
    edit_ir(tmp_path / f"{case}.txt", layer, key, value)
    out = tmp_path / "out"
    single = (folder / "calib.npy").is_file()
    cfg = write_cfg(tmp_path / "opt.cfg", graph=tmp_path / f"{case}.txt", bin=tmp_path / f"{case}.bin",
                    model_name=case, dataset="NumpyDataset" if single else "NumpyMultiInputDataset",
                    calibration_data=folder / ("calib.npy" if single else "calib.npz"), output_dir=out, **fields)
    result = run_in_process("--cfg", cfg)
    report = f"exit {result.exit_code}\n{result.output}"
    errors = [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]
    assert result.exit_code == 1 and "Traceback" not in result.output, report
    assert len(errors) == 1 and errors[0] == result.stderr.rstrip("\n").splitlines()[-1], report
    assert f"layer '{layer}'" in errors[0] and message in errors[0], report
    assert not out.exists() or not any(out.iterdir())


def assert_edit_stops_npuopt_run(quantized: Path, tmp_path: Path, inputs, layer: str, key: str, value: str,
                                 message: str) -> None:
    """npuopt-run on a copy of the quantized IR with `key` of `layer` set to `value` (inputs: the
    .npy files): one error line naming the layer and `message`, nothing written."""
    ir = tmp_path / quantized.name
    shutil.copyfile(quantized, ir)
    shutil.copyfile(quantized.with_suffix(".bin"), ir.with_suffix(".bin"))
    edit_ir(ir, layer, key, value)
    given = [a for p in inputs for a in ("--input", str(p))]
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", str(ir), *given, "-o", str(tmp_path / "o.npz")],
                            capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("npuopt-run: error:") and f"layer '{layer}'" in lines[0] and message in lines[0]
    assert not (tmp_path / "o.npz").exists()


def run_in_process(*args, verbose: bool = False):
    """`npuopt ARGS` through click in this process: cheap, for checks that need no clean process."""
    from click.testing import CliRunner

    from npuopt import cfg_reader
    from npuopt.cli import main
    from npuopt.logger import set_verbose

    active_cfg = cfg_reader._current
    try:
        return CliRunner().invoke(main, [*map(str, args)] + (["--verbose"] if verbose else []))
    finally:
        set_verbose(False)
        cfg_reader._current = active_cfg


def assert_verbose_traceback(*args, fragment: str) -> None:
    """With --verbose the same error comes with its traceback."""
    result = run_in_process(*args, verbose=True)
    assert result.exit_code != 0, result.output
    assert "Traceback (most recent call last)" in result.stderr, result.stderr
    assert re.search(r"^npuopt: error: .*" + re.escape(fragment), result.stderr, re.M), result.stderr


# ---- reporting -------------------------------------------------------------------
def pytest_terminal_summary(terminalreporter):
    """The share of identical elements that the conformance tests record (test_conformance.py):
    how many runs agree with the tool chain on every element, and the others."""
    shares = {report.nodeid: value for reports in terminalreporter.stats.values() for report in reports
              if getattr(report, "when", None) == "call"
              for key, value in getattr(report, "user_properties", ()) if key == "identical_share"}
    if not shares:
        return
    exact = sum(value == 1.0 for value in shares.values())
    terminalreporter.write_sep("-", f"OPT conformance: {exact} of {len(shares)} runs identical on every element")
    for nodeid, value in sorted(shares.items()):
        if value < 1.0:
            terminalreporter.write_line(f"{value:9.4%} identical  {nodeid}")


def invoke_export(*args, cwd: Path):
    """npuopt-export ARGS in this process (click's runner) from folder `cwd`:
    (exit code, stdout, stderr)."""
    from click.testing import CliRunner
    from npuopt_export.export import main as export_main

    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(export_main, [str(a) for a in args])
    finally:
        os.chdir(before)
    return result.exit_code, result.stdout, result.stderr
