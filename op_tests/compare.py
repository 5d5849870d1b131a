"""Compare npuopt-run's dump with npuopt's own quantized forward, tensor by tensor.

    python op_tests/compare.py NAME QUANTIZED_IR DUMP_DIR --input a.npy [--input b.npy ...]

Loads the quantized IR with npuopt, runs its quantized forward on the inputs
keeping every tensor, and counts the elements of every tensor that differ from
the runner's dump (DUMP_DIR/index.json names the files). Integer tensors must
be equal; float tensors (layers kept in float) may differ by float32 rounding
only. Prints the first mismatching element of each tensor that differs, then
one last line: `PASS NAME` or `FAIL NAME: N mismatches in tensor T` (T the first
such tensor in the order the layers run). Exit status 0 on PASS.

`run_case(folder, overrides)` does the whole op test (quantize, run the runner,
compare) in this process, for the pytest suite.
"""
import argparse
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

FLOAT_RTOL = 1e-5
FLOAT_ATOL = 1e-6


def npuopt_tensors(ir_path: str, inputs: Sequence[np.ndarray]) -> Tuple[List[str], Dict[str, np.ndarray]]:
    """Every tensor of npuopt's quantized forward, in the order the layers run."""
    import torch

    import npuopt.ops  # noqa: F401  (registers the forwards)
    from npuopt.ir import read_graph

    graph = read_graph(ir_path)
    graph.forward([torch.from_numpy(np.ascontiguousarray(x)) for x in inputs], keep_tensors=True)
    order = [t.name for node in graph.nodes for t in node.outputs]
    return order, {name: graph.tensor(name).betensor.detach().cpu().numpy() for name in order}


def mismatches(want: np.ndarray, got: np.ndarray, exact: bool = False) -> np.ndarray:
    """Boolean mask of differing elements: exact for integers (for floats too where
    `exact`), float32 rounding for floats."""
    floats = np.issubdtype(want.dtype, np.floating) or np.issubdtype(got.dtype, np.floating)
    if floats and exact:
        return ~((want == got) | (np.isnan(want) & np.isnan(got)))
    if floats:
        want, got = want.astype(np.float64), got.astype(np.float64)
        scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
        return ~(np.abs(want - got) <= FLOAT_ATOL * scale + FLOAT_RTOL * np.abs(want))
    return want.astype(np.int64) != got.astype(np.int64)


def compare(name: str, order: List[str], npuopt_values: Dict[str, np.ndarray], dump_dir: str,
            exact: bool = False) -> Tuple[bool, str]:
    """(passed, the last line), printing a detail line for every differing tensor
    (`exact`: float tensors too must be equal)."""
    with open(os.path.join(dump_dir, "index.json")) as f:
        index = json.load(f)
    first = None
    for tensor in order:
        want = npuopt_values[tensor]
        if tensor not in index:
            print(f"  {tensor}: missing from the runner's dump")
            first = first or (1, tensor)
            continue
        got = np.load(os.path.join(dump_dir, index[tensor]))
        if got.shape != want.shape:
            print(f"  {tensor}: shape {list(got.shape)} from npuopt-run, {list(want.shape)} from npuopt")
            first = first or (want.size, tensor)
            continue
        bad = mismatches(want, got, exact)
        count = int(bad.sum())
        if count:
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            print(f"  {tensor}: {count} of {want.size} elements differ; first at {list(where)}: "
                  f"npuopt {want[where]}, npuopt-run {got[where]}")
            first = first or (count, tensor)
    if first:
        return False, f"FAIL {name}: {first[0]} mismatches in tensor {first[1]}"
    return True, f"PASS {name}"


def case_inputs(folder: str) -> List[str]:
    """The case's run inputs in0.npy, in1.npy, ... in the IR's input order."""
    count = len([f for f in os.listdir(folder) if f.startswith("in") and f.endswith(".npy")])
    return [os.path.join(folder, f"in{i}.npy") for i in range(count)]


def run_case(folder: str, overrides: Dict[str, str] = None, exact: bool = False) -> Tuple[bool, str]:
    """What run_one.sh does, in this process: quantize with npuopt (`overrides`: cfg
    fields, as run_one.sh's --set), run npuopt-run with --dump, compare (`exact`: float
    tensors too). Returns (passed, the PASS/FAIL line)."""
    import contextlib
    import io
    import shutil

    from npuopt.config import load_config
    from npuopt.errors import NpuoptError
    from npuopt.optmaster import OptMaster
    from npuopt.plugins import load_plugins
    from npuopt_run import cli

    name = os.path.basename(os.path.abspath(folder))
    work = os.path.join(folder, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        load_plugins()
        OptMaster(load_config(os.path.join(folder, "opt.cfg"), overrides)).run()
    except NpuoptError as e:
        return False, f"FAIL {name}: npuopt: error: {e}"
    ir = os.path.join(work, f"{name}_o.txt")
    inputs = case_inputs(folder)
    argv = [ir] + [a for x in inputs for a in ("--input", x)]
    argv += ["-o", os.path.join(work, "refrun.npz"), "--dump", os.path.join(work, "dump")]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
        except SystemExit as e:
            if e.code:
                return False, f"FAIL {name}: {err.getvalue().strip()}"
    order, values = npuopt_tensors(ir, [np.load(x) for x in inputs])
    return compare(name, order, values, os.path.join(work, "dump"), exact)


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name")
    p.add_argument("ir")
    p.add_argument("dump")
    p.add_argument("--input", action="append", default=[])
    args = p.parse_args(argv)
    order, values = npuopt_tensors(args.ir, [np.load(x) for x in args.input])
    passed, line = compare(args.name, order, values, args.dump)
    print(line)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
