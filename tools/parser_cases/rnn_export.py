"""torch's nn.LSTM and nn.GRU as npuopt-export writes them and as the tool chain's parser
writes them from ONNX: each model here is a parser case (parser_export_*, the parser's
IR) and, through tools/export_op_tests.py, an op test of npuopt-export's IR (export_*);
tests/test_export_rnn.py compares the two layer for layer (BasicLSTM, GRUv1,
ReverseSequence: params, weights and biases). Small: 5 steps of 3 features, 4 cells.
The modules take [batch, time, features]; the sequence-first ones transpose inside."""
import torch

from op_cases.common import Case

T, I, H = 5, 3, 4


class Recurrent(torch.nn.Module):
    """`kind` (LSTM/GRU) with its options; returns the output sequence, and h_n with
    `last_state`; with `states` the initial states are model inputs [layers·dirs, 1, H]."""

    def __init__(self, kind: str, layers: int = 1, bidirectional: bool = False, batch_first: bool = True,
                 states: bool = False, last_state: bool = False, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.rnn = getattr(torch.nn, kind)(I, H, num_layers=layers, bidirectional=bidirectional,
                                           batch_first=batch_first)
        self.batch_first, self.states, self.last_state = batch_first, states, last_state

    def forward(self, x, *states):
        if not self.batch_first:
            x = x.transpose(0, 1)
        if self.states:
            y, h = self.rnn(x, tuple(states) if len(states) == 2 else states[0])
        else:
            y, h = self.rnn(x)
        if not self.batch_first:
            y = y.transpose(0, 1)
        if not self.last_state:
            return y
        return y, (h[0] if isinstance(h, tuple) else h)


# name -> (Recurrent's arguments, the inputs' shapes without the batch axis)
MODELS = {
    "lstm2": (dict(kind="LSTM", layers=2), [(T, I)]),
    "lstm_bi_seq_first": (dict(kind="LSTM", bidirectional=True, batch_first=False, last_state=True), [(T, I)]),
    "lstm_states": (dict(kind="LSTM", states=True, last_state=True), [(T, I), (1, H), (1, H)]),
    "gru_bi2": (dict(kind="GRU", layers=2, bidirectional=True), [(T, I)]),
    "gru_states": (dict(kind="GRU", states=True, last_state=True, batch_first=False), [(T, I), (1, H)]),
}


def model(name: str) -> Recurrent:
    return Recurrent(**MODELS[name][0]).eval()


def _build(name):
    def build(rng, onnx_path):
        shapes = MODELS[name][1]
        example = tuple(torch.zeros((1,) + s) for s in shapes)
        outputs = ["y", "h_n"] if MODELS[name][0].get("last_state") else ["y"]
        torch.onnx.export(model(name), example, onnx_path, input_names=[f"in{i}" for i in range(len(shapes))],
                          output_names=outputs, opset_version=13, dynamo=False)
    return build


def _one_sample(rng, shapes, n, value_range, run):
    """States within (-1, 1); one run sample (the parser's reshapes fix batch 1)."""
    return [(rng.random(((1 if run else n),) + s) * 2 - 1).astype("float32") for s in shapes]


CASES = [Case(f"parser_export_{name}", f"torch nn.{args['kind']} {args} through ONNX (npuopt-export's: export_{name})",
              shapes, _build(name), data=_one_sample)
         for name, (args, shapes) in MODELS.items()]
