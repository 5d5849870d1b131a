"""The exporter's recurrent handlers: torch's nn.LSTM / nn.GRU (aten.lstm.input,
aten.gru.input) and CTC greedy decoding, written as the tool chain's parser writes them
from ONNX, so that the IR holds the layers and params a user of the tool chain gets:

- each layer and direction is one BasicLSTM (tops Y, H, C) or GRUv1 (torch's GRU is
  ONNX's linear_before_reset = 1; tops H, and Hn where h_n is read) running forward
  over a [batch, time, input] sequence; the backward direction runs between two
  ReverseSequence layers (lengths: an int32 Constant of the full length per batch item);
  the two directions' sequences are concatenated on the feature axis;
- weights [gates·hidden, input + hidden] (the input's columns first), LSTM gate rows
  i, g, f, o and biases b_ih + b_hh; GRU rows r, z, n and biases [b_r, b_z, b_in, b_hn];
- initial states: Constant [1, hidden] when every batch row is the same (zeros when the
  model passes none; one Constant serves h0 and c0 of every layer then), else per layer
  and direction a slice of the model's state input.
tools/parser_cases/rnn_export.py makes the same models through ONNX and the real parser;
tests/test_export_rnn.py compares the layers."""
import operator

import torch

from npuopt.ops.ctcgreedydecoder import decode

from .export_graph import Act
from .export_ops import _fail, _slice

CTC_LABELS = 4096  # the top [batch, 4096, 1, 1] the parser writes for TensorFlow's decoder
# torch's LSTM gate rows (i, f, g, o) in the parser's order (i, g, f, o)
LSTM_ROWS = (0, 2, 1, 3)
# the out_sequence names of torch's outputs (sequence, h_n, c_n)
TOP_NAMES = {"BasicLSTM": ("Y", "H", "C"), "GRUv1": ("H", "Hn")}


@torch.library.custom_op("npuopt::ctc_greedy_decoder", mutates_args=())
def ctc_greedy_decoder(scores: torch.Tensor, merge_repeated: bool = True) -> torch.Tensor:
    """TensorFlow's CTC greedy decoding of scores [batch, time, classes] (blank: the last
    class) over every step: the labels [batch, 4096, 1, 1] (int32), padded with 2^31 - 1.
    Call it in a model's forward; npuopt-export writes it as a CTCGreedyDecoder layer."""
    batch, steps, _ = scores.shape
    lengths = torch.full((batch,), steps, dtype=torch.int64)
    fill = torch.iinfo(torch.int32).max
    return decode(scores.detach(), lengths, merge_repeated, CTC_LABELS, fill).to(torch.int32)


@ctc_greedy_decoder.register_fake
def _ctc_shape(scores, merge_repeated=True):
    return scores.new_empty((scores.shape[0], CTC_LABELS, 1, 1), dtype=torch.int32)


def ctc_decode(ex, node, scores, merge_repeated=True):
    act = ex.act(scores)
    if act.rank != 3:
        _fail(ex, f"CTC decoding takes scores [batch, time, classes], got {act.rank}-D")
    act = ex.need(act, (0, 1, 2))
    lengths = _lengths(ex, act, "lengths")
    return ex.emit("CTCGreedyDecoder", [act, lengths], {"merge_repeated": bool(merge_repeated)},
                   perm=(0, 1, 2, 3), top_shape=True)


def _lengths(ex, seq: Act, suffix: str) -> Act:
    """int32 lengths [batch] of the whole time axis, as the parser writes them."""
    batch, steps = seq.shape[0], seq.shape[1]
    return ex.emit("Constant", [], constants={"weights": torch.full((batch,), steps, dtype=torch.int32)},
                   shape=(batch,), perm=(0,), suffix=suffix)


def _reversed(ex, seq: Act, name: str) -> Act:
    """The sequence [batch, time, features] backwards in time (ReverseSequence)."""
    return ex.emit("ReverseSequence", [seq, _lengths(ex, seq, name + ".lengths")], {"batch_axis": 0, "time_axis": 1},
                   shape=seq.shape, suffix=name)


class _States:
    """The initial states of one call: per (layer·directions + direction) the IR tensor of
    h0 (and c0) [rows, hidden]."""

    def __init__(self, ex, values, hidden: int):
        self.ex, self.values, self.hidden = ex, values, hidden
        self.zeros = None

    def get(self, which: int, index: int) -> Act:
        ex, value = self.ex, self.values[which]
        if isinstance(value, torch.Tensor):
            rows = value[index].detach().float()
            if not (rows == rows[:1]).all():
                return ex.constant(rows, (0, 1))
            if not rows.any():
                if self.zeros is None:
                    self.zeros = ex.constant(rows[:1], (0, 1))
                return self.zeros
            return ex.constant(rows[:1], (0, 1))
        act = ex.act(value)
        picked = _slice(ex, act, 0, index, index + 1, 1)
        return ex.reshape(picked, act.shape[1:])


def _weights(kind: str, w_ih, w_hh, b_ih, b_hh, hidden: int):
    """(weights, biases) of one layer and direction in the parser's layout."""
    weights = torch.cat([w_ih, w_hh], dim=1).detach().float()
    if b_ih is None:
        b_ih = b_hh = torch.zeros(w_ih.shape[0])
    b_ih, b_hh = b_ih.detach().float(), b_hh.detach().float()
    if kind == "BasicLSTM":
        rows = torch.cat([torch.arange(g * hidden, (g + 1) * hidden) for g in LSTM_ROWS])
        return weights[rows].contiguous(), (b_ih + b_hh)[rows].contiguous()
    gates = 2 * hidden
    return weights, torch.cat([b_ih[:gates] + b_hh[:gates], b_ih[gates:], b_hh[gates:]])


def _direction(ex, kind, seq: Act, states, index, tensors, hidden, suffix, out_sequence):
    """One layer and direction: its tops (Acts: Y [batch, time, hidden], then H, C)."""
    batch, steps, size = seq.shape
    weights, biases = _weights(kind, *tensors, hidden)
    bottoms = [seq, states.get(0, index)] + ([states.get(1, index)] if kind == "BasicLSTM" else [])
    layer_params = {"time_steps": steps, "input_size": size, "cell_size": hidden,
                    "activations": ["SIGMOID", "TANH", "TANH"] if kind == "BasicLSTM" else ["SIGMOID", "TANH"],
                    "direction": "forward", "out_sequence": out_sequence}
    shapes = [(batch, steps, hidden) if s in ("Y", "H") and i == 0 else (batch, hidden)
              for i, s in enumerate(out_sequence)]
    return ex.emit_tops(kind, bottoms, layer_params, {"weights": weights, "biases": biases}, shapes, suffix)


def _recurrent(kind: str, ex, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
               batch_first):
    if train and dropout:
        _fail(ex, "dropout in training mode: export the model in eval mode")
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != per * num_layers * directions:
        _fail(ex, "an LSTM with proj_size has no IR form (BasicLSTM has no projection)")
    act = ex.act(x)
    if act.rank != 3:
        _fail(ex, f"takes a batched 3-D input, got {act.rank}-D")
    seq = ex.need(act if batch_first else ex.permute(act, (1, 0, 2)), (0, 1, 2))
    hidden = params[1].shape[1]
    states = _States(ex, hx if kind == "BasicLSTM" else [hx], hidden)
    read = {u.args[1] for u in node.users if u.target is operator.getitem}
    lstm = kind == "BasicLSTM"
    out_sequence = _out_sequence(lstm, num_layers, directions, read)
    finals = {1: [], 2: []}
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            index = layer * directions + d
            tensors = list(params[index * per:(index + 1) * per]) + [None] * (4 - per)
            suffix = f"l{layer}" + ("_reverse" if d else "")
            source = _reversed(ex, seq, suffix + ".reverse_in") if d else seq
            tops = _direction(ex, kind, source, states, index, tensors, hidden, suffix, out_sequence)
            y = _reversed(ex, tops[0], suffix + ".reverse_out") if d else tops[0]
            outs.append(y)
            for which in read & {1, 2}:
                finals[which].append(_final(ex, tops, TOP_NAMES[kind][which], out_sequence))
        seq = outs[0] if directions == 1 else ex.emit("Concat", outs, {"axis": 2}, suffix=f"l{layer}.concat",
                                                      shape=(seq.shape[0], seq.shape[1], directions * hidden))
    y = seq if batch_first else ex.permute(seq, (1, 0, 2))
    results = [y] + [_stacked(ex, finals[w], f"{'hc'[w - 1]}_n") if w in read else None for w in (1, 2)]
    return tuple(results[:3 if lstm else 2])


def _final(ex, tops, name: str, out_sequence) -> Act:
    """The last state (`name`: H, C or Hn) of one layer and direction: its top, or the last
    step of its sequence (a bidirectional GRU's, which has no state top)."""
    if name in out_sequence:
        return tops[out_sequence.index(name)]
    seq = tops[0]
    steps = seq.shape[1]
    return ex.reshape(_slice(ex, seq, 1, steps - 1, steps, 1), (seq.shape[0], seq.shape[2]))


def _out_sequence(lstm: bool, num_layers: int, directions: int, read) -> list:
    """The tops the parser asks for: ONNX's outputs that torch's export keeps (all of them
    for several layers, the ones the model reads for one), but a bidirectional GRU's
    sequence only (the parser splits it so)."""
    if directions == 2 and not lstm:
        return ["H"]
    keep = set(range(3)) if num_layers > 1 or directions == 2 else {0} | set(read)
    return [n for i, n in enumerate(TOP_NAMES["BasicLSTM" if lstm else "GRUv1"]) if i in keep]


def _stacked(ex, finals, suffix: str) -> Act:
    """h_n / c_n [layers·directions, batch, hidden] from the layers' last states."""
    batch, hidden = finals[0].shape
    rows = [ex.reshape(f, (1, batch, hidden)) for f in finals]
    if len(rows) == 1:
        return rows[0]
    return ex.emit("Concat", rows, {"axis": 0}, shape=(len(rows), batch, hidden), suffix=suffix)


def lstm(ex, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrent("BasicLSTM", ex, node, x, hx, params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first)


def gru(ex, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrent("GRUv1", ex, node, x, hx, params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first)


HANDLERS = {
    torch.ops.aten.lstm.input: lstm,
    torch.ops.aten.gru.input: gru,
    torch.ops.npuopt.ctc_greedy_decoder.default: ctc_decode,
}
