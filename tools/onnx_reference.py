"""ONNX Runtime's output on a parser case's run inputs, as `op_tests/<case>/onnxruntime.npy`:
the reference that tests/test_ops_rnn.py holds the float forward of the parser's IR to.
Rebuilds each case's ONNX model as tools/parser_op_tests.py does (same seeds); an
LSTM/GRU in batch-first layout (which ONNX Runtime does not run) is run as its
sequence-first twin, inputs and output transposed. Runs beside the parser:
    /path/to/parser_venv/bin/python tools/onnx_reference.py CASE...
"""
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parser_op_tests import all_cases  # noqa: E402

OP_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "op_tests")


def sequence_first(model) -> bool:
    """Turn batch-first recurrent nodes (layout 1) sequence-first; whether any was."""
    changed = False
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "layout" and a.i == 1:
                a.i, changed = 0, True
    if changed:
        for value in list(model.graph.input) + list(model.graph.output):
            dims = value.type.tensor_type.shape.dim
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    return changed


def reference(case) -> np.ndarray:
    folder = os.path.join(OP_TESTS, case.name)
    rng = np.random.default_rng(sum(map(ord, case.name)))
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "model.onnx")
        case.build(rng, path)
        model = onnx.load(path)
        flip = sequence_first(model)
        session = onnxruntime.InferenceSession(model.SerializeToString())
    inputs = [np.load(os.path.join(folder, f"in{i}.npy")) for i in range(len(case.inputs))]
    if flip:
        inputs = [x.transpose(1, 0, 2) for x in inputs]
    y = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})[0]
    return y.transpose(2, 0, 1, 3) if flip else y   # Y [T, directions, B, H] -> [B, T, directions, H]


def main(names) -> None:
    for case in all_cases():
        if case.name in names:
            out = os.path.join(OP_TESTS, case.name, "onnxruntime.npy")
            np.save(out, reference(case).astype(np.float32))
            print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
