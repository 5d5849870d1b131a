"""Generate op tests from IRs written by the tool chain's own parser: for each case of
tools/parser_cases/, an ONNX model (or, where the case's `parser` says `model_type = tf`,
a TensorFlow frozen graph), made by the case, parsed by the Compass Unified Parser into a
float IR, in a folder of op_tests/ laid out as tools/gen_op_tests.py lays
out its own (NAME.txt/.bin, calib data, in*.npy, opt.cfg, run.sh) plus the parser.cfg
used (and, where the case has a `reference`, source_outputs.npz: the source model's outputs
on in*.npy as its own runtime computes them). Conformance (tests/test_conformance.py) and op_tests/run.sh take them as any op
test; their IRs hold the params exactly as the parser writes them.

Runs beside the parser, not npuopt: in a venv with the parser's requirements (torch,
onnx, onnxruntime, tensorflow-cpu; ../shared/data/parser_irs/README.md), e.g.
    /path/to/parser_venv/bin/python tools/parser_op_tests.py \\
        --parser /path/to/compass_unified_parser/main.py [--out OP_TESTS_DIR] [CASE ...]
Deterministic for a given parser and ONNX exporter: each case seeds its own generator.
"""
import argparse
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
from typing import List

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # op_cases/, parser_cases/

import parser_cases  # noqa: E402
from op_cases.common import Case, write_case_data  # noqa: E402

PARSER_CFG = """\
[Common]
model_type = {model_type}
model_name = {name}
input_model = {model}
input = {inputs}
input_shape = {shapes}
output_dir = out
"""


def all_cases() -> List[Case]:
    cases = []
    for info in sorted(pkgutil.iter_modules(parser_cases.__path__), key=lambda i: i.name):
        cases += importlib.import_module(f"parser_cases.{info.name}").CASES
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        sys.exit(f"parser_op_tests: case name(s) defined twice: {', '.join(duplicates)}")
    return cases


MODEL_FILES = {"onnx": "model.onnx", "tf": "model.pb"}  # the file each model_type's case writes


def model_file(case: Case, workdir: str) -> str:
    return os.path.join(workdir, MODEL_FILES[case.parser.get("model_type", "onnx")])


def parse(case: Case, parser_main: str, workdir: str, rng) -> str:
    """The case's model through the parser; the folder holding its IR (NAME.txt/.bin)."""
    fields = dict(case.parser)
    model_type = fields.pop("model_type", "onnx")
    case.build(rng, model_file(case, workdir))
    inputs = ",".join(f"in{i}" for i in range(len(case.inputs)))
    # the model's input shapes; a case whose parser options replace its input (gamut_preprocess) gives
    # the model's own as `input_shape`, its `inputs` being the data's (the IR's)
    shapes = fields.pop("input_shape", None) or ",".join(str([1, *shape]).replace(" ", "") for shape in case.inputs)
    cfg = PARSER_CFG.format(name=case.name, model_type=model_type, model=MODEL_FILES[model_type], inputs=inputs,
                            shapes=shapes)
    cfg += "".join(f"{key} = {value}\n" for key, value in fields.items())
    with open(os.path.join(workdir, "parser.cfg"), "w") as f:
        f.write(cfg)
    run = subprocess.run([sys.executable, parser_main, "-c", "parser.cfg"], cwd=workdir, capture_output=True,
                         text=True)
    log = run.stdout + run.stderr
    errors = [line for line in log.splitlines() if line.startswith("[E]")]
    if run.returncode != 0 or "Parser done!" not in log or errors:
        sys.exit(f"parser_op_tests: the parser failed on case {case.name}:\n" + "\n".join((errors or
                                                                                           log.splitlines())[-20:]))
    return os.path.join(workdir, "out")


def write_case(case: Case, root: str, parser_main: str) -> None:
    rng = np.random.default_rng(sum(map(ord, case.name)))
    torch.manual_seed(0)
    folder = os.path.join(root, case.name)
    with tempfile.TemporaryDirectory() as workdir:
        out = parse(case, parser_main, workdir, rng)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        with open(os.path.join(out, f"{case.name}.txt")) as f:
            text = re.sub(r"^model_bin=.*$", f"model_bin=./{case.name}.bin", f.read(), count=1, flags=re.M)
        with open(os.path.join(folder, f"{case.name}.txt"), "w") as f:
            f.write(text)
        shutil.copyfile(os.path.join(out, f"{case.name}.bin"), os.path.join(folder, f"{case.name}.bin"))
        shutil.copyfile(os.path.join(workdir, "parser.cfg"), os.path.join(folder, "parser.cfg"))
        write_case_data(folder, case, rng, writer="parser_op_tests.py")
        if case.reference is not None:
            inputs = [np.load(os.path.join(folder, f"in{i}.npy")) for i in range(len(case.inputs))]
            np.savez(os.path.join(folder, "source_outputs.npz"), *case.reference(model_file(case, workdir), inputs))


def main(argv: List[str]) -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--parser", required=True, help="the parser's main.py")
    args.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "op_tests"), help="the op tests' folder")
    args.add_argument("cases", nargs="*", help="cases to write (all by default)")
    opts = args.parse_args(argv)
    cases = all_cases()
    unknown = set(opts.cases) - {c.name for c in cases}
    if unknown:
        sys.exit(f"parser_op_tests: unknown case(s) {', '.join(sorted(unknown))}")
    for case in cases:
        if not opts.cases or case.name in opts.cases:
            write_case(case, opts.out, os.path.abspath(opts.parser))
            print(f"wrote {os.path.join(opts.out, case.name)}")


if __name__ == "__main__":
    main(sys.argv[1:])
