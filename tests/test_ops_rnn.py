"""The recurrent layers (BasicLSTM, GRUv1, GRUv3) and ReverseSequence: float forwards against
torch's nn.LSTM / nn.GRU and a direct transcription of ONNX's GRU (linear_before_reset 0),
the gate activations with their alphas and betas, the initial states over the batch, and
one-line errors on bad params (in the op forward, and through `npuopt --cfg`)."""
import shutil

import numpy as np
import pytest
import torch

from conftest import REPO, edit_ir, run_in_process
from npuopt.errors import IRError
from test_ops_float import close, run

torch.manual_seed(0)
T, I, H = 5, 3, 4


def _lstm_params(rnn, reverse=False, out_sequence=("Y", "H", "C")):
    """torch's gates (i, f, g, o) as the IR's (i, g, f, o), input columns first."""
    def order(v):
        i, f, g, o = v.chunk(4)
        return torch.cat([i, g, f, o])
    w = order(torch.cat([rnn.weight_ih_l0, rnn.weight_hh_l0], dim=1)).detach()
    b = order(rnn.bias_ih_l0 + rnn.bias_hh_l0).detach()
    params = dict(time_steps=T, input_size=I, cell_size=H, direction="reverse" if reverse else "forward",
                  out_sequence=list(out_sequence))
    return params, {"weights": w, "biases": b}


@pytest.mark.parametrize("reverse", [False, True])
def test_basiclstm_matches_torch(reverse):
    rnn = torch.nn.LSTM(I, H, batch_first=True)
    x, h0, c0 = torch.randn(2, T, I), torch.randn(2, H) * 0.5, torch.randn(2, H)
    params, constants = _lstm_params(rnn, reverse)
    y, h, c = run("BasicLSTM", [x, h0, c0], params, constants, n_tops=3)
    with torch.no_grad():
        want, (wh, wc) = rnn(x.flip(1) if reverse else x, (h0[None], c0[None]))
    close(y, want.flip(1) if reverse else want)
    close(h, wh[0])
    close(c, wc[0])


def test_gruv1_matches_torch_and_states_cycle_over_the_batch():
    """torch's GRU is linear_before_reset = 1; one initial state row serves every item."""
    rnn = torch.nn.GRU(I, H, batch_first=True)
    w = torch.cat([rnn.weight_ih_l0, rnn.weight_hh_l0], dim=1).detach()
    bi, bh = rnn.bias_ih_l0.detach(), rnn.bias_hh_l0.detach()
    b = torch.cat([bi[:2 * H] + bh[:2 * H], bi[2 * H:], bh[2 * H:]])
    x, h0 = torch.randn(3, T, I), torch.randn(1, H) * 0.5
    y, last = run("GRUv1", [x, h0], dict(time_steps=T, input_size=I, cell_size=H, out_sequence=["H", "Hn"]),
                  {"weights": w, "biases": b}, n_tops=2)
    with torch.no_grad():
        want, wlast = rnn(x, h0[None].expand(1, 3, H).contiguous())
    close(y, want)
    close(last, wlast[0])


def _gru_v3_reference(x, h, w, b, steps):
    """ONNX GRU with linear_before_reset = 0 (the IR's gate order r, u)."""
    out = []
    for t in range(steps):
        g = torch.sigmoid(torch.cat([x[:, t], h], 1) @ w[:2 * H].T + b[:2 * H])
        r, u = g.chunk(2, dim=1)
        c = torch.tanh(torch.cat([x[:, t], r * h], 1) @ w[2 * H:].T + b[2 * H:])
        h = (1 - u) * c + u * h
        out.append(h)
    return torch.stack(out, 1)


def test_gruv3_matches_onnx_semantics_over_fewer_steps_backwards():
    w, b = torch.randn(3 * H, I + H) * 0.5, torch.randn(3 * H) * 0.2
    x, h0 = torch.randn(2, T, I), torch.zeros(1, H)
    y = run("GRUv3", [x, h0], dict(time_steps=T - 1, input_size=I, cell_size=H, direction="reverse",
                                   out_sequence=["H"]), {"weights": w, "biases": b})
    close(y, _gru_v3_reference(x.flip(1)[:, :T - 1], h0.expand(2, H), w, b, T - 1).flip(1))


def test_gate_activations_take_alphas_and_betas_in_order():
    """HardSigmoid takes the first alpha and beta, LeakyRelu the second alpha, Softsign none;
    threshold clamps every gate input, cell_clip the cell."""
    w, b = torch.randn(4 * H, I + H), torch.randn(4 * H) * 0.2
    x = torch.randn(2, T, I)
    params = dict(time_steps=T, input_size=I, cell_size=H, activations=["HARDSIGMOID", "LEAKYRELU", "SOFTSIGN"],
                  activation_alpha=[0.3, 0.1], activation_beta=[0.4], threshold=1.5, cell_clip=0.7,
                  out_sequence=["Y"])
    zero = torch.zeros(1, H)
    y = run("BasicLSTM", [x, zero, zero], params, {"weights": w, "biases": b})
    h = c = torch.zeros(2, H)
    want = []
    for t in range(T):
        z = torch.clamp(torch.cat([x[:, t], h], 1) @ w.T + b, -1.5, 1.5)
        i, g, f, o = (torch.clamp(0.3 * v + 0.4, 0, 1) for v in z.chunk(4, 1))
        g = torch.nn.functional.leaky_relu(z.chunk(4, 1)[1], 0.1)
        c = torch.clamp(f * c + i * g, -0.7, 0.7)
        h = o * c / (1 + c.abs())
        want.append(h)
    close(y, torch.stack(want, 1))


def test_reverse_sequence_per_item_shared_and_whole():
    x = torch.randn(2, 4, 6, 3)
    lengths = torch.tensor([6, 0, 3, 5], dtype=torch.int32)
    got = run("ReverseSequence", [x, lengths], dict(batch_axis=1, time_axis=2))
    want = x.clone()
    for item, n in enumerate(lengths.tolist()):
        want[:, item, :n] = x[:, item, :n].flip(1)
    close(got, want)
    one = run("ReverseSequence", [x, torch.tensor([9], dtype=torch.int32)], dict(batch_axis=0, time_axis=2))
    close(one, x.flip(2))  # one length for the batch; past the axis it is the axis
    close(run("ReverseSequence", [x], dict(batch_axis=0, time_axis=3)), x.flip(3))


def _lstm(**change):
    params = dict(time_steps=T, input_size=I, cell_size=H, out_sequence=["Y"])
    params.update(change)
    return params


LSTM_W = {"weights": torch.randn(4 * H, I + H), "biases": torch.randn(4 * H)}
X, S = torch.randn(1, T, I), torch.zeros(1, H)
ERRORS = [
    ("BasicLSTM", [X, S], _lstm(), LSTM_W, 1, "takes 3 inputs"),
    ("BasicLSTM", [X, S, S], _lstm(time_steps=T + 1), LSTM_W, 1, "time_steps 6 is more than the input's 5 steps"),
    ("BasicLSTM", [X, S, S], _lstm(time_steps=0), LSTM_W, 1, "time_steps must be at least 1"),
    ("BasicLSTM", [X, S, S], _lstm(input_size=4), LSTM_W, 1, "input_size 4 does not match"),
    ("BasicLSTM", [X, S, S], _lstm(cell_size=5), LSTM_W, 1, "weights have shape [16, 7], expected [20, 8]"),
    ("BasicLSTM", [X, S, S], _lstm(), {**LSTM_W, "biases": torch.randn(12)}, 1, "biases have shape [12]"),
    ("BasicLSTM", [X, S, S], _lstm(direction="bidirectional"), LSTM_W, 1, "unsupported direction 'bidirectional'"),
    ("BasicLSTM", [X, S, S], _lstm(activations=["SIGMOID", "TANH"]), LSTM_W, 1, "activations must name 3"),
    ("BasicLSTM", [X, S, S], _lstm(activations=["SIGMOID", "GELU", "TANH"]), LSTM_W, 1,
     "unsupported activations ['GELU']"),
    ("BasicLSTM", [X, S, S], _lstm(out_sequence=["C", "Y"]), LSTM_W, 2, "unsupported out_sequence ['C', 'Y']"),
    ("BasicLSTM", [X, S, S], _lstm(out_sequence=["Y", "H"]), LSTM_W, 1, "gives 2 tops, the IR has 1"),
    ("BasicLSTM", [X, S, S], _lstm(threshold=-1.0), LSTM_W, 1, "threshold must be a positive number"),
    ("BasicLSTM", [X, S, S], _lstm(cell_clip=0), LSTM_W, 1, "cell_clip must be a positive number"),
    ("BasicLSTM", [X, S, S], _lstm(activation_alpha=["a"]), LSTM_W, 1, "activation_alpha must be a list"),
    ("BasicLSTM", [X, torch.zeros(1, H + 1), S], _lstm(), LSTM_W, 1, "initial state (input 1) must be [batch, 4]"),
    ("BasicLSTM", [X[0], S, S], _lstm(), LSTM_W, 1, "input 0 must be [batch, time, input_size]"),
    ("GRUv1", [X, S], dict(time_steps=T, out_sequence=["Y"]),
     {"weights": torch.randn(3 * H, I + H), "biases": torch.randn(4 * H)}, 1, "unsupported out_sequence ['Y']"),
    ("GRUv3", [X, S], dict(time_steps=T, out_sequence=["H"]),
     {"weights": torch.randn(3 * H, I + H), "biases": torch.randn(4 * H)}, 1, "biases have shape [16], expected [12]"),
    ("ReverseSequence", [X, torch.tensor([2])], dict(batch_axis=1, time_axis=1), None, 1,
     "batch_axis and time_axis are both 1"),
    ("ReverseSequence", [X, torch.tensor([-2])], dict(batch_axis=0, time_axis=1), None, 1,
     "sequence lengths must be non-negative"),
    ("ReverseSequence", [X], dict(batch_axis=0, time_axis=3), None, 1, "time_axis 3 is out of range"),
]


@pytest.mark.parametrize("optype,inputs,params,constants,n_tops,message", ERRORS)
def test_one_line_errors(optype, inputs, params, constants, n_tops, message):
    with pytest.raises(IRError) as e:
        run(optype, inputs, params, constants, n_tops=n_tops)
    assert str(e.value).startswith(f"layer 'op' ({optype}): ") and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case,layer,key,value,fragment", [
    ("lstm", "lstm_fw", "direction", "sideways", "unsupported direction 'sideways' (supported: forward, reverse)"),
    ("lstm", "lstm_bw", "time_steps", "9", "time_steps 9 is more than the input's 6 steps"),
    ("gru", "gru_v3", "out_sequence", "[H,C]", "unsupported out_sequence ['H', 'C']"),
    ("gru", "gru_v3", "activations", "[SIGMOID,SWISH]", "unsupported activations ['SWISH']"),
    ("reverse_sequence", "shared", "time_axis", "0", "batch_axis and time_axis are both 0"),
])
def test_bad_params_stop_npuopt_with_one_line(tmp_path, case, layer, key, value, fragment):
    """Through `npuopt --cfg`: one error line naming the layer and the param, exit 1, no
    traceback, no IR written."""
    folder = tmp_path / case
    shutil.copytree(REPO / "op_tests" / case, folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / f"{case}.txt", layer, key, value)
    out = tmp_path / "out"
    sets = [f"graph={folder / f'{case}.txt'}", f"bin={folder / f'{case}.bin'}",
            f"calibration_data={folder / 'calib.npy'}", f"output_dir={out}"]
    result = run_in_process("--cfg", folder / "opt.cfg", *[arg for item in sets for arg in ("--set", item)])
    report = f"exit {result.exit_code}\n{result.stderr}"
    assert result.exit_code == 1 and "Traceback" not in result.stderr + result.stdout, report
    errors = [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]
    assert len(errors) == 1 and errors[0] == result.stderr.rstrip("\n").splitlines()[-1], report
    assert f"layer '{layer}'" in errors[0] and fragment in errors[0], report
    assert not out.exists() or not any("_o." in p.name for p in out.iterdir()), report


def test_states_that_are_not_zero_keep_the_grid_they_come_on(tmp_path):
    """A nonzero initial state from another layer's top is read on that top's grid: the
    second LSTM of op test lstm_states quantizes (its h0 is the first one's last step)."""
    from npuopt.ir import read_graph
    import npuopt.ops  # noqa: F401
    folder = REPO / "op_tests" / "lstm_states"
    out = tmp_path / "out"
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={out}")
    assert result.exit_code == 0, result.output
    graph = read_graph(str(out / "lstm_states_o.txt"))
    second = graph.node("lstm_top_states")
    assert second.quantized and np.isclose(float(graph.node("last_state").outputs[0].scale),
                                           float(second.outputs[0].scale))


PARSER_CASES = ["parser_lstm", "parser_lstm_bi", "parser_lstm_states", "parser_gru_bi", "parser_gru_v3",
                "parser_lstm_activations"]


@pytest.mark.parametrize("case", PARSER_CASES)
def test_parser_irs_compute_what_onnx_runtime_computes(case):
    """The float forward of the IR the parser wrote from an ONNX LSTM/GRU equals ONNX Runtime's
    output of that model (op_tests/<case>/onnxruntime.npy, tools/onnx_reference.py)."""
    from npuopt.ir import read_graph
    folder = REPO / "op_tests" / case
    graph = read_graph(str(folder / f"{case}.txt"))
    inputs = [torch.from_numpy(np.load(folder / f"in{i}.npy")) for i in range(len(graph.input_tensors))]
    got = graph.forward(inputs)[0]
    close(got.reshape(-1), torch.from_numpy(np.load(folder / "onnxruntime.npy")).reshape(-1))


def test_internal_statistics_travel_in_the_statistic_file(tmp_path):
    """The recurrent layers' internal tensors (gate inputs, states) are calibrated with the
    tops and saved in statistic_file: a run that loads it writes the same IR."""
    cfg = REPO / "op_tests" / "lstm" / "opt.cfg"
    for run in ("first", "second"):
        result = run_in_process("--cfg", cfg, "--set", f"output_dir={tmp_path / run}",
                                "--set", f"statistic_file={tmp_path / 'stats.pt'}")
        assert result.exit_code == 0, result.output
    for suffix in (".txt", ".bin"):
        assert (tmp_path / "first" / f"lstm_o{suffix}").read_bytes() == \
            (tmp_path / "second" / f"lstm_o{suffix}").read_bytes()
