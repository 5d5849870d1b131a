"""Generate the op tests in op_tests/: one folder per case, each a tiny float IR,
its data, an opt.cfg with the case's quantization settings, and a run.sh that
quantizes with `npuopt`, runs the reference runner `npuopt-run` on the
quantized IR, and compares every tensor with npuopt's quantized forward
(op_tests/compare.py).

Deterministic: the same script writes the same bytes. Run:
    python tools/gen_op_tests.py [OP_TESTS_DIR] [CASE ...]
"""
import importlib
import os
import pkgutil
import shutil
import sys
from typing import List

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # op_cases/, also when imported by the tests

import op_cases  # noqa: E402
from op_cases.common import Case, write_case_data  # noqa: E402

from npuopt.dtype import Dtype  # noqa: E402
from npuopt.ir import write_graph  # noqa: E402
from npuopt.ir.builder import GraphBuilder  # noqa: E402


def all_cases() -> List[Case]:
    """The CASES of every module in op_cases/, in module order; names must be unique."""
    cases = []
    for info in sorted(pkgutil.iter_modules(op_cases.__path__), key=lambda i: i.name):
        if info.name != "common":
            cases += importlib.import_module(f"op_cases.{info.name}").CASES
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        sys.exit(f"gen_op_tests: case name(s) defined twice: {', '.join(duplicates)}")
    return cases


CASES = all_cases()


def write_case(case: Case, root: str) -> None:
    """Write one case's folder from a seed of its own, so cases do not shift each other."""
    rng = np.random.default_rng(sum(map(ord, case.name)))
    torch.manual_seed(0)
    folder = os.path.join(root, case.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    b = GraphBuilder(case.name)
    names = [b.input(f"in{i}", (1,) + shape, dtype=Dtype.from_name(case.dtype_of(i)))
             for i, shape in enumerate(case.inputs)]
    outputs = case.build(b, rng, names)
    graph = b.build(outputs)
    if not any(t.dtype.is_float for t in graph.tensors):
        graph.header["compat_quantized_model"] = False  # as the parser says it: else the tool chain reads it quantized
    write_graph(graph, os.path.join(folder, case.name + ".txt"))
    write_case_data(folder, case, rng)


def main(argv: List[str]) -> None:
    root = argv[0] if argv else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "op_tests")
    wanted = set(argv[1:])
    unknown = wanted - {c.name for c in CASES}
    if unknown:
        sys.exit(f"gen_op_tests: unknown case(s) {', '.join(sorted(unknown))}")
    for case in CASES:
        if not wanted or case.name in wanted:
            write_case(case, root)
            print(f"wrote {os.path.join(root, case.name)}")


if __name__ == "__main__":
    main(sys.argv[1:])
