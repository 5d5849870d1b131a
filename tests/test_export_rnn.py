"""Issue 45: npuopt-export writes torch's nn.LSTM / nn.GRU as the tool chain's parser does.

For each model of tools/parser_cases/rnn_export.py, op_tests/export_<name> (npuopt-export's
IR, which conformance runs through OPT's reader) is what tools/export_op_tests.py writes today, and its
recurrent layers (BasicLSTM, GRUv1, ReverseSequence, in graph order) carry the params,
weights and biases of the same layers in op_tests/parser_export_<name> (the real parser's
IR of the same torch model through ONNX). The exported IRs run as PyTorch does (CTC greedy
decoding included), and an LSTM with projections (no IR form) is refused naming proj_size.
"""
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import REPO
from npuopt.errors import ExportError
from npuopt.ir import read_graph
from npuopt_export.export import export_model
from npuopt_export.export_check import MIN_COSINE
from npuopt_export.export_rnn import ctc_greedy_decoder

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


@pytest.mark.parametrize("name", list(rnn_export.MODELS))
def test_exported_recurrent_ir_matches_pytorch(name):
    shapes = [[1, *s] for s in rnn_export.MODELS[name][1]]
    _, checks = export_model(rnn_export.model(name), shapes, name)
    assert all(cosine >= MIN_COSINE for cosine, _ in checks), checks


class Recognizer(nn.Module):
    """Per-step scores of a GRU, decoded by ctc_greedy_decoder (blank: the last class)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.GRU(3, 8, batch_first=True, bidirectional=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        scores = self.head(self.rnn(x)[0])
        return scores, ctc_greedy_decoder(scores)


def test_ctc_greedy_decoder_exports_as_the_layer_and_decodes_as_pytorch():
    model = Recognizer().eval()
    graph, _ = export_model(model, [[1, 12, 3]], "recognizer")
    assert [n.type for n in graph.nodes].count("CTCGreedyDecoder") == 1
    x = torch.randn(1, 12, 3, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        labels = graph.forward([x])[1]
        want = model(x)[1]
    assert torch.equal(labels.reshape(want.shape).to(torch.int64), want.to(torch.int64))
    assert (want[0, :12] != torch.iinfo(torch.int32).max).any()  # something was decoded


def test_lstm_with_projections_is_refused_naming_proj_size():
    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(3, 8, proj_size=4, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    with pytest.raises(ExportError, match="proj_size"):
        export_model(Projected().eval(), [[1, 5, 3]], "projected")
