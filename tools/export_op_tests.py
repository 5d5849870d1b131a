"""Write op tests of IRs that npuopt-export writes: for each model of
tools/parser_cases/rnn_export.py, op_tests/export_<name>/ (NAME.txt/.bin exported from the
torch module, calib data, in*.npy, opt.cfg, run.sh, as tools/gen_op_tests.py lays them
out), so that conformance (tests/test_conformance.py) runs OPT's reader on npuopt-export's
IRs; tests/test_export_rnn.py checks they are what the exporter writes today and that their
recurrent layers are the parser's (parser_export_<name>).

    python tools/export_op_tests.py [--out OP_TESTS_DIR] [NAME ...]
"""
import argparse
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # op_cases/, parser_cases/

from op_cases.common import write_case_data  # noqa: E402
from parser_cases import rnn_export  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export_ir(name: str, prefix: str):
    """Export model `name` at batch 1 to PREFIX.txt/.bin."""
    from npuopt.ir import write_graph
    from npuopt_export.export import export_model

    shapes = [[1, *s] for s in rnn_export.MODELS[name][1]]
    graph, _ = export_model(rnn_export.model(name), shapes, os.path.basename(prefix))
    write_graph(graph, prefix + ".txt", prefix + ".bin", bin_name=os.path.basename(prefix) + ".bin")


def write(name: str, root: str) -> str:
    case = next(c for c in rnn_export.CASES if c.name == f"parser_export_{name}")
    folder = os.path.join(root, f"export_{name}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    export_ir(name, os.path.join(folder, f"export_{name}"))
    case.doc = case.doc.replace("through ONNX (npuopt-export's: export_", "by npuopt-export (the parser's: "
                                "parser_export_")
    rng = np.random.default_rng(sum(map(ord, os.path.basename(folder))))  # the same data wherever written
    write_case_data(folder, case, rng, writer="export_op_tests.py")
    return folder


def main(argv) -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--out", default=os.path.join(REPO, "op_tests"), help="the op tests' folder")
    args.add_argument("names", nargs="*", help=f"models to write (all by default: {', '.join(rnn_export.MODELS)})")
    opts = args.parse_args(argv)
    unknown = set(opts.names) - set(rnn_export.MODELS)
    if unknown:
        sys.exit(f"export_op_tests: unknown model(s) {', '.join(sorted(unknown))}")
    for name in opts.names or rnn_export.MODELS:
        print(f"wrote {write(name, opts.out)}")


if __name__ == "__main__":
    main(sys.argv[1:])
