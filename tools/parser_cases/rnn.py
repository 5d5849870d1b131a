"""Recurrent models through the parser: torch's nn.LSTM (2 layers; bidirectional; initial
states as model inputs) and nn.GRU (bidirectional) exported to ONNX, which the parser
writes as BasicLSTM / GRUv1 layers with ReverseSequence for the backward direction; ONNX
GRU with linear_before_reset = 0 run backwards (GRUv3), and an ONNX LSTM with other gate
activations and a clip (onnx.helper). The sequences run one sample at a time (the
parser's reshapes fix batch 1), so the run data is one sample."""
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from op_cases.common import Case, uniform

T, I, H = 6, 4, 8
# the 2-layer LSTM and the bidirectional GRU that tests/test_rnn_models.py measures: longer sequences
LONG_T, LONG_I, LONG_H = 50, 10, 20


class _Recurrent(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *states):
        if len(states) == 2:
            return self.rnn(x, tuple(states))[0]
        return self.rnn(x, *states)[0]


def _export(module, onnx_path, *shapes):
    module.eval()
    example = tuple(torch.zeros((1,) + s) for s in shapes)
    torch.onnx.export(module, example, onnx_path, input_names=[f"in{i}" for i in range(len(shapes))],
                      output_names=["out"], opset_version=13, dynamo=False)


def _torch_case(rnn, *shapes):
    return lambda rng, onnx_path: _export(_Recurrent(rnn()), onnx_path, *shapes)


def _onnx_rnn(op, onnx_path, rng, gates, **attrs):
    """An ONNX LSTM/GRU (opset 14, layout 1: batch first) over [1, T, I], random weights, output Y."""
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    w = numpy_helper.from_array((rng.standard_normal((directions, gates * H, I)) * 0.5).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((directions, gates * H, H)) * 0.5).astype(np.float32), "R")
    b = numpy_helper.from_array((rng.standard_normal((directions, 2 * gates * H)) * 0.2).astype(np.float32), "B")
    node = helper.make_node(op, ["in0", "W", "R", "B"], ["Y"], hidden_size=H, layout=1, **attrs)
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, T, I])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, T, directions, H])],
                              [w, r, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.save(model, onnx_path)


def _one_sample(ranges):
    """Calibration samples as usual; one run sample (the IR runs samples one at a time)."""
    def data(rng, shapes, n, value_range, run):
        return [uniform(rng, r or value_range, ((1 if run else n),) + s) for r, s in zip(ranges, shapes)]
    return data


SEQUENCE = _one_sample([None])
CASES = [
    Case("parser_lstm", "torch nn.LSTM, 2 layers, batch_first (two BasicLSTM)", [(LONG_T, LONG_I)],
         _torch_case(lambda: torch.nn.LSTM(LONG_I, LONG_H, num_layers=2, batch_first=True), (LONG_T, LONG_I)),
         data=SEQUENCE),
    Case("parser_lstm_bi", "torch nn.LSTM, bidirectional (BasicLSTM, ReverseSequence)", [(T, I)],
         _torch_case(lambda: torch.nn.LSTM(I, H, bidirectional=True, batch_first=True), (T, I)), data=SEQUENCE),
    Case("parser_lstm_states", "torch nn.LSTM with h0 and c0 as model inputs", [(T, I), (1, H), (1, H)],
         _torch_case(lambda: torch.nn.LSTM(I, H, batch_first=True), (T, I), (1, H), (1, H)),
         data=_one_sample([None, (-0.8, 0.8), (-2.0, 2.0)])),
    Case("parser_gru_bi", "torch nn.GRU, bidirectional (GRUv1, ReverseSequence)", [(LONG_T, LONG_I)],
         _torch_case(lambda: torch.nn.GRU(LONG_I, LONG_H, bidirectional=True, batch_first=True),
                     (LONG_T, LONG_I)), data=SEQUENCE),
    Case("parser_gru_v3", "ONNX GRU, linear_before_reset 0, reverse (GRUv3)", [(T, I)],
         lambda rng, path: _onnx_rnn("GRU", path, rng, 3, direction="reverse", linear_before_reset=0),
         data=SEQUENCE),
    Case("parser_lstm_activations", "ONNX LSTM with HardSigmoid, LeakyRelu, Softsign gates and clip (float)",
         [(T, I)], lambda rng, path: _onnx_rnn("LSTM", path, rng, 4, activations=["HardSigmoid", "LeakyRelu",
                                                                                      "Softsign"],
                                               activation_alpha=[0.3, 0.1], activation_beta=[0.4], clip=3.0),
         data=SEQUENCE),
]
