"""Issue 45: npuopt-export writes torch's nn.LSTM / nn.GRU as the tool chain's parser does.

For each model of tools/parser_cases/rnn_export.py, op_tests/export_<name> (npuopt-export's
IR, which conformance runs through OPT's reader) is what tools/export_op_tests.py writes today, and its
recurrent layers (BasicLSTM, GRUv1, ReverseSequence, in graph order) carry the params,
weights and biases of the same layers in op_tests/parser_export_<name> (the real parser's
IR of the same torch model through ONNX).
"""
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO
from npuopt.ir import read_graph

sys.path.insert(0, str(REPO / "tools"))
from parser_cases import rnn_export  # noqa: E402

import export_op_tests  # noqa: E402

RECURRENT = ("BasicLSTM", "GRUv1", "ReverseSequence")


def recurrent_layers(prefix):
    graph = read_graph(f"{prefix}.txt", f"{prefix}.bin")
    return [node for node in graph.nodes if node.type in RECURRENT]


@pytest.mark.parametrize("name", list(rnn_export.MODELS))
def test_export_op_test_is_what_the_exporter_writes_today(name, tmp_path):
    written = Path(export_op_tests.write(name, str(tmp_path)))
    folder = REPO / "op_tests" / f"export_{name}"
    assert sorted(p.name for p in written.iterdir()) == sorted(p.name for p in folder.iterdir() if p.name != "work")
    for path in written.iterdir():
        assert path.read_bytes() == (folder / path.name).read_bytes(), f"op_tests/export_{name}/{path.name} differs"


@pytest.mark.parametrize("name", list(rnn_export.MODELS))
def test_recurrent_layers_are_the_parsers(name):
    ours = recurrent_layers(REPO / "op_tests" / f"export_{name}" / f"export_{name}")
    parsers = recurrent_layers(REPO / "op_tests" / f"parser_export_{name}" / f"parser_export_{name}")
    assert [n.type for n in ours] == [n.type for n in parsers]
    for mine, theirs in zip(ours, parsers):
        assert dict(mine.params) == dict(theirs.params), mine.name
        assert sorted(mine.constants) == sorted(theirs.constants), mine.name
        for key, value in mine.constants.items():
            torch.testing.assert_close(value.betensor, theirs.constants[key].betensor, rtol=0, atol=1e-6, msg=f"{mine.name}: {key}")
