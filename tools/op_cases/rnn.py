"""Recurrent layers (BasicLSTM, GRUv1, GRUv3) over their params: both directions, every
out_sequence form, threshold, cell_clip, forget_bias, time_steps shorter than the input,
initial states as zero constants, as graph inputs and as another layer's tops, every gate
activation the parser writes (the ones OPT has no table for stay float); and
ReverseSequence with per-item lengths, one length for the batch, and none."""
import torch

from op_cases.common import Case, uniform, weights

T, I, H = 6, 5, 7


def _zeros(b, name, size=H):
    return b.layer("Constant", name, [], {}, {"weights": torch.zeros(1, size)})[0]


def _rnn(b, rng, kind, name, bottoms, in_size, out_sequence, **params):
    gates = 4 if kind == "BasicLSTM" else 3
    bias_rows = 3 if kind == "GRUv3" else 4
    p = dict(time_steps=params.pop("time_steps", T), input_size=in_size, cell_size=H,
             direction=params.pop("direction", "forward"), out_sequence=out_sequence, **params)
    constants = {"weights": weights(rng, gates * H, in_size + H), "biases": weights(rng, bias_rows * H, scale=0.2)}
    return b.layer(kind, name, bottoms, p, constants, n_tops=len(out_sequence))


def _lstm(b, rng, x):
    """Forward YHC with forget_bias, then backward over 5 of the 6 steps with threshold and cell_clip."""
    zero = _zeros(b, "zero_state")
    y, h, c = _rnn(b, rng, "BasicLSTM", "lstm_fw", [x[0], zero, zero], I, ["Y", "H", "C"],
                   activations=["SIGMOID", "TANH", "TANH"], forget_bias=1)
    back = _rnn(b, rng, "BasicLSTM", "lstm_bw", [y, zero, zero], H, ["Y"], direction="reverse", time_steps=T - 1,
                threshold=2.5, cell_clip=0.8)
    return [h, c] + back


def _lstm_states(b, rng, x):
    """Initial states from graph inputs (YC), then from the first layer's H and C (H)."""
    y, c = _rnn(b, rng, "BasicLSTM", "lstm_in_states", [x[0], x[1], x[2]], I, ["Y", "C"])
    h2 = _rnn(b, rng, "BasicLSTM", "lstm_top_states", [y, y_last(b, y), c], H, ["H"])
    return [y, c] + h2


def y_last(b, y):
    """The last step of a [1, T, H] sequence as a [1, H] state."""
    step = b.layer("Slice", "last_step", [y], dict(begin=[0, T - 1, 0], end=[1, T, H], strides=[1, 1, 1]))[0]
    return b.layer("Reshape", "last_state", [step], dict(shape=[1, H]))[0]


def _gru(b, rng, x):
    """GRUv3 forward (H and Hn), then GRUv1 backward over 5 steps with threshold."""
    zero = _zeros(b, "zero_state")
    seq, last = _rnn(b, rng, "GRUv3", "gru_v3", [x[0], zero], I, ["H", "Hn"], activations=["SIGMOID", "TANH"])
    back = _rnn(b, rng, "GRUv1", "gru_v1_bw", [seq, zero], H, ["H"], direction="reverse", time_steps=T - 1,
                threshold=3.0)
    return [last] + back


def _gru_states(b, rng, x):
    """GRUv1 from a graph input state (Hn), GRUv3 from that layer's top (H)."""
    last = _rnn(b, rng, "GRUv1", "gru_v1_state", [x[0], x[1]], I, ["Hn"])[0]
    return [last] + _rnn(b, rng, "GRUv3", "gru_v3_state", [x[0], last], I, ["H"])


def _activations(b, rng, x):
    """Every gate activation of ONNX, alphas and betas consumed in order."""
    zero = _zeros(b, "zero_state")
    return (_rnn(b, rng, "BasicLSTM", "lstm_hard", [x[0], zero, zero], I, ["Y"],
                 activations=["HARDSIGMOID", "LEAKYRELU", "SOFTSIGN"], activation_alpha=[0.3, 0.1],
                 activation_beta=[0.4])
            + _rnn(b, rng, "BasicLSTM", "lstm_elu", [x[0], zero, zero], I, ["H"],
                   activations=["SIGMOID", "ELU", "SOFTPLUS"], activation_alpha=[0.5])
            + _rnn(b, rng, "GRUv1", "gru_affine", [x[0], zero], I, ["H"], activations=["SIGMOID", "AFFINE"],
                   activation_alpha=[0.7], activation_beta=[0.1])
            + _rnn(b, rng, "GRUv3", "gru_scaled", [x[0], zero], I, ["H"], activations=["RELU", "SCALEDTANH"],
                   activation_alpha=[1.2], activation_beta=[0.8])
            + _rnn(b, rng, "GRUv3", "gru_thresholded", [x[0], zero], I, ["Hn"],
                   activations=["HARDSIGMOID", "THRESHOLDEDRELU"]))


def _states_data(rng, shapes, n, value_range, run):
    """The sequence in (-1, 1), h0 in (-0.8, 0.8), c0 in (-2, 2)."""
    ranges = [value_range, (-0.8, 0.8), (-2.0, 2.0)]
    return [uniform(rng, r, (n,) + s) for r, s in zip(ranges, shapes)]


def _reverse_sequence(b, rng, x):
    """Per-item lengths (batch along axis 1, time along 2), one length for the batch
    (axes 0 and 1), no lengths input (time along the last axis)."""
    lengths = b.layer("Constant", "lengths", [], {}, {"weights": torch.tensor([6, 0, 3, 5], dtype=torch.int32)})[0]
    one = b.layer("Constant", "one_length", [], {}, {"weights": torch.tensor([3], dtype=torch.int32)})[0]
    per_item = b.layer("ReverseSequence", "per_item", [x[0], lengths], dict(batch_axis=1, time_axis=2))
    shared = b.layer("ReverseSequence", "shared", [x[0], one], dict(batch_axis=0, time_axis=1))
    whole = b.layer("ReverseSequence", "whole", [x[0]], dict(batch_axis=0, time_axis=3))
    return per_item + shared + whole


CASES = [
    Case("lstm", "BasicLSTM forward (YHC, forget_bias) and reverse (5 steps, threshold, cell_clip)", [(T, I)],
         _lstm),
    Case("lstm_states", "BasicLSTM from graph-input states, and from another layer's tops", [(T, I), (H,), (H,)],
         _lstm_states, data=_states_data),
    Case("gru", "GRUv3 forward (H, Hn), GRUv1 reverse (5 steps, threshold)", [(T, I)], _gru),
    Case("gru_states", "GRUv1 from a graph-input state, GRUv3 from its last state", [(T, I), (H,)], _gru_states,
         data=_states_data),
    Case("rnn_activations", "recurrent layers with every ONNX gate activation (kept float when quantized)",
         [(T, I)], _activations),
    Case("reverse_sequence", "ReverseSequence per item, one length, and no lengths", [(4, 6, 3)],
         _reverse_sequence, run_range=(-1.0, 1.0)),
]
