"""BitShift, Bitwise, Mod, DivMod, IsInf, IsNaN and CTCGreedyDecoder: float forwards against
references written from the definitions (NumPy's shifts and bitwise operators in the
inputs' types, Python's integer division, C's fmod, TensorFlow's greedy CTC decoding), the
quantized forms (integer tops in the float IR's types, Mod's rescaled inputs inside their
ranges, CTC's 16-bit labels), and the one-line errors of bad params (in process, and
through `npuopt` and `npuopt-run` as a user runs them)."""
import numpy as np
import pytest
import torch

import npuopt.ops  # noqa: F401
from npuopt.dtype import Dtype
from npuopt.ir import read_graph
from npuopt.ir.builder import GraphBuilder

from conftest import REPO
from test_ops_poolmorph import npuopt_rejects, npuopt_run_rejects, one_line_ir_error

OP_TESTS = REPO / "op_tests"
rng = np.random.default_rng(45)


def typed(values, name):
    """An input of IR type `name` (its values in npuopt's backend type)."""
    dtype = Dtype.from_name(name)
    return torch.as_tensor(np.asarray(values)).to(dtype.torch_dtype), dtype


def run(optype, inputs, params, n_tops=1, top_shapes=None):
    """One layer on `inputs` ((tensor, Dtype) pairs, or float tensors); its tops."""
    inputs = [x if isinstance(x, tuple) else (x, Dtype.FP32) for x in inputs]
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x, dtype) for i, (x, dtype) in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, n_tops=n_tops, top_shapes=top_shapes)
    outs = b.build(tops).forward([x for x, _ in inputs])
    return outs if n_tops > 1 else outs[0]


def ints(name, lo, hi, shape=(2, 3, 5)):
    return rng.integers(lo, hi + 1, shape).astype(name)


# ---- BitShift, Bitwise ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint16", "int32"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_is_numpys_in_the_inputs_type(name, direction):
    """NumPy's shift of the values in their own type (LEFT wraps to the type's width; amounts
    past the width or negative give 0, or the sign bits for RIGHT)."""
    info = np.iinfo(name)
    x = ints(name, max(info.min, -2 ** 24), min(info.max, 2 ** 24))
    s = ints("int32", -2, 40, (2, 3, 1))
    got = run("BitShift", [typed(x, name), typed(s, "int32")], dict(direction=direction))
    wide, amount = x.astype(np.int64), s.astype(np.int64)
    inside = (amount >= 0) & (amount < info.bits)
    if direction == "LEFT":
        want = np.where(inside, (wide << np.where(inside, amount, 0)) & ((1 << info.bits) - 1), 0).astype(name)
    else:
        want = np.where((amount >= 0) & (amount < 64), wide >> np.clip(amount, 0, 63), np.where(wide < 0, -1, 0))
    np.testing.assert_array_equal(got.numpy().astype(np.int64), want.astype(name).astype(np.int64))


@pytest.mark.parametrize("method, fn", [("AND", np.bitwise_and), ("OR", np.bitwise_or), ("XOR", np.bitwise_xor)])
@pytest.mark.parametrize("a_type, b_type", [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"),
                                            ("int16", "int32")])
def test_bitwise_is_numpys(method, fn, a_type, b_type):
    a = ints(a_type, np.iinfo(a_type).min, np.iinfo(a_type).max)
    b = ints(b_type, np.iinfo(b_type).min, np.iinfo(b_type).max, (2, 1, 5))
    got = run("Bitwise", [typed(a, a_type), typed(b, b_type)], dict(method=method))
    np.testing.assert_array_equal(got.numpy().astype(np.int64), fn(a, b).astype(np.int64))


@pytest.mark.parametrize("name", ["int8", "uint8", "uint16"])
def test_bitwise_not(name):
    x = ints(name, np.iinfo(name).min, np.iinfo(name).max)
    got = run("Bitwise", [typed(x, name)], dict(method="not"))
    np.testing.assert_array_equal(got.numpy().astype(np.int64), np.bitwise_not(x).astype(np.int64))


# ---- DivMod, Mod --------------------------------------------------------------------------
def reference_divmod(a, b, mode):
    q = np.zeros_like(a, dtype=np.int64)
    r = np.zeros_like(a, dtype=np.int64)
    for i, (x, y) in enumerate(zip(a.reshape(-1).tolist(), np.broadcast_to(b, a.shape).reshape(-1).tolist())):
        if y:
            q.flat[i] = x // y if mode == "FLOOR" else int(x / y) if abs(x) < 2 ** 52 else 0
            r.flat[i] = x - y * q.flat[i]
    return q, r


@pytest.mark.parametrize("mode", ["FLOOR", "TRUNC"])
def test_divmod_is_pythons_division(mode):
    a = ints("int16", -1000, 1000)
    b = ints("int16", -7, 7, (2, 3, 1))
    q, r = run("DivMod", [typed(a, "int16"), typed(b, "int16")], dict(mode=mode), n_tops=2)
    want_q, want_r = reference_divmod(a.astype(np.int64), b.astype(np.int64), mode)
    np.testing.assert_array_equal(q.numpy(), want_q)
    np.testing.assert_array_equal(r.numpy(), want_r)
    assert q.dtype == torch.int16 and r.dtype == torch.int16


def test_divmod_saturates_to_the_type():
    q, r = run("DivMod", [typed([[-128, -128, 7]], "int8"), typed([[-1, 0, -2]], "int8")], {}, n_tops=2)
    assert q.tolist() == [[127, 0, -4]] and r.tolist() == [[0, 0, -1]]


def test_mod_float_is_the_tool_chains_float32():
    a = torch.from_numpy(rng.uniform(-6, 6, (3, 7)).astype(np.float32))
    b = torch.from_numpy(rng.choice([-1.5, -0.75, 0.5, 1.25, 2.0], (3, 1)).astype(np.float32))
    fmod = run("Mod", [a, b], dict(fmod=True))
    mod = run("Mod", [a, b], dict(fmod=False))
    np.testing.assert_array_equal(fmod.numpy(), np.fmod(a.numpy(), b.numpy()))
    np.testing.assert_array_equal(mod.numpy(), a.numpy() - np.floor_divide(a.numpy(), b.numpy()) * b.numpy())
    np.testing.assert_allclose(mod.numpy(), np.mod(a.numpy(), b.numpy()), atol=1e-5)


def test_mod_of_integers_is_exact_and_a_zero_divisor_gives_0():
    a = typed([[7, -7, 7, -7, 5]], "int32")
    b = typed([[3, 3, -3, -3, 0]], "int32")
    assert run("Mod", [a, b], dict(fmod=False)).tolist() == [[1, 2, -2, -1, 0]]
    assert run("Mod", [a, b], dict(fmod=True)).tolist() == [[1, -1, 1, -1, 0]]


# ---- IsInf, IsNaN ---------------------------------------------------------------------------
X_SPECIAL = torch.tensor([[1.0, np.inf, -np.inf, np.nan, -0.0, 3e38]])


@pytest.mark.parametrize("positive, negative", [(True, True), (True, False), (False, True), (False, False)])
def test_isinf_flags(positive, negative):
    got = run("IsInf", [X_SPECIAL], dict(detect_positive=positive, detect_negative=negative))
    assert got.dtype == torch.uint8
    assert got.tolist() == [[0, int(positive), int(negative), 0, 0, 0]]


def test_isnan():
    assert run("IsNaN", [X_SPECIAL], {}).tolist() == [[0, 0, 0, 1, 0, 0]]


# ---- CTCGreedyDecoder -----------------------------------------------------------------------
def scores_of(best, classes=5):
    """Scores whose best class at each step is `best` (a tie with class 0 where best is 0)."""
    x = torch.zeros(len(best), classes)
    for t, c in enumerate(best):
        x[t, c] = 1.0
    return x


BEST = [1, 1, 4, 1, 2, 2, 4, 3]  # class 4 is the blank


@pytest.mark.parametrize("length, merge, labels", [(0, True, [1, 1, 2, 3]), (0, False, [1, 1, 1, 2, 2, 3]),
                                                   (5, True, [1, 1, 2]), (5, False, [1, 1, 1, 2]),
                                                   (20, True, [1, 1, 2, 3])])
def test_ctc_greedy_is_tensorflows(length, merge, labels):
    """TensorFlow's greedy decoding: repeats merged unless separated by the blank (the last
    class), blanks dropped; a length of 0 (or past the steps) takes every step."""
    x = torch.stack([scores_of(BEST), scores_of([0] * 8)])
    got = run("CTCGreedyDecoder", [x, typed([length, 3], "int32")], dict(merge_repeated=merge),
              top_shapes=[[1, 10, 1, 1]])
    assert got.shape == (2, 10, 1, 1)
    pad = 2 ** 31 - 1
    assert got[0, :, 0, 0].tolist() == labels + [pad] * (10 - len(labels))
    second = [0] if merge else [0, 0, 0]  # class 0 at every step, the first 3 steps taken
    assert got[1, :, 0, 0].tolist() == second + [pad] * (10 - len(second))


def test_ctc_greedy_ties_take_the_first_class():
    x = torch.tensor([[[0.5, 0.5, 0.1], [0.1, 0.7, 0.7]]])
    got = run("CTCGreedyDecoder", [x, typed([0], "int32")], dict(merge_repeated=False), top_shapes=[[1, 3, 1, 1]])
    assert got[0, :, 0, 0].tolist() == [0, 1, 2 ** 31 - 1]


# ---- quantized forms ----------------------------------------------------------------------
def quantized(case, tmp_path, *sets):
    """The op test's IR quantized by npuopt (with `sets` over its opt.cfg), read back."""
    from conftest import run_in_process
    folder = OP_TESTS / case
    args = [a for item in [f"output_dir={tmp_path}", *sets] for a in ("--set", item)]
    result = run_in_process("--cfg", folder / "opt.cfg", *args)
    assert result.exit_code == 0, result.output
    return read_graph(str(tmp_path / f"{case}_o.txt"))


@pytest.mark.parametrize("case", ["bitshift", "bitwise", "divmod", "mod_int"])
def test_integer_layers_keep_the_float_irs_types(case, tmp_path):
    """On integer inputs the tops keep the parser's integer types as unscaled integers (DivMod's
    both take input 0's, which are the op test's)."""
    floats = {t.name: t.dtype for n in read_graph(str(OP_TESTS / case / f"{case}.txt")).nodes for t in n.outputs}
    for node in quantized(case, tmp_path).nodes:
        if node.type == "Input":
            continue
        for t in node.outputs:
            assert node.quantized and t.dtype == floats[t.name], (node.name, t.dtype)
            assert float(t.scale) == 1.0 and int(t.zerop) == 0, (node.name, t.scale, t.zerop)


def test_mod_inputs_brought_to_the_output_scale_stay_in_their_ranges(tmp_path):
    """The tool chain clamps each rescaled input to its own range: npuopt's output scale keeps
    every reachable q + zp inside it (the dividend's range is wider than the output's)."""
    graph = quantized("mod", tmp_path)
    for node in (n for n in graph.nodes if n.type == "Mod"):
        assert node.quantized
        for t, m, s in zip(node.inputs, node.params["scale_value"], node.params["shift_value"]):
            reach = max(abs(t.qmin + int(t.zerop)), abs(t.qmax + int(t.zerop)))
            assert round(reach * m * 2.0 ** -s) <= (t.qmax if t.qinvariant else max(t.qmax, -t.qmin)), node.name
        scale = float(node.outputs[0].scale)
        assert scale <= float(node.inputs[0].scale)  # the dividend reaches further than the remainder


@pytest.mark.parametrize("force_int, dtype", [("false", Dtype.UINT16), ("true", Dtype.INT16)])
def test_ctc_labels_are_16_bit_and_the_checks_uint8(force_int, dtype, tmp_path):
    graph = quantized("ctc_greedy", tmp_path, f"force_dtype_int={force_int}")
    for node in (n for n in graph.nodes if n.type == "CTCGreedyDecoder"):
        assert node.quantized and node.outputs[0].dtype == dtype and float(node.outputs[0].scale) == 1.0
    checks = quantized("parser_isinf_isnan", tmp_path / "checks")
    for node in (n for n in checks.nodes if n.type in ("IsInf", "IsNaN")):
        assert node.quantized and node.outputs[0].dtype == Dtype.UINT8 and float(node.outputs[0].scale) == 1.0


# ---- one-line errors ------------------------------------------------------------------------
I8 = typed([[1, 2, 3]], "int8")
F3 = torch.tensor([[1.0, 2.0, 3.0]])
SCORES = torch.zeros(1, 4, 3)
LENGTH = typed([2], "int32")
ERRORS = [
    ("BitShift", [I8, I8], dict(direction="UP"), {}, "unsupported direction 'UP' (supported: LEFT, RIGHT)"),
    ("BitShift", [F3, I8], dict(direction="LEFT"), {}, "takes integer inputs of at most 32 bits, input 'in0' is"),
    ("BitShift", [I8, I8, I8], dict(direction="LEFT"), {}, "takes 2 inputs, the IR gives 3"),
    ("BitShift", [I8, typed([[1, 2]], "int8")], dict(direction="LEFT"), {}, "do not broadcast"),
    ("Bitwise", [I8, I8], dict(method="NAND"), {}, "unsupported method 'NAND'"),
    ("Bitwise", [I8, I8], dict(method="NOT"), {}, "takes 1 inputs, the IR gives 2"),
    ("Bitwise", [I8, typed([[1]], "int64")], dict(method="AND"), {}, "at most 32 bits, input 'in1' is int64"),
    ("Mod", [F3, F3], dict(fmod="maybe"), {}, "fmod must be true or false, got 'maybe'"),
    ("Mod", [F3], dict(fmod=True), {}, "takes 2 inputs, the IR gives 1"),
    ("DivMod", [I8, I8], dict(mode="ROUND"), dict(n_tops=2), "unsupported mode 'ROUND' (supported: FLOOR, TRUNC)"),
    ("DivMod", [I8, I8], dict(mode="FLOOR"), {}, "gives 2 tops (quotient, remainder), the IR has 1"),
    ("IsInf", [F3], dict(detect_positive=2), {}, "detect_positive must be true or false, got 2"),
    ("IsNaN", [F3, F3], {}, {}, "takes 1 input and 1 output, the IR gives 2 and 1"),
    ("CTCGreedyDecoder", [F3, LENGTH], {}, dict(top_shapes=[[1, 4, 1, 1]]), "takes scores [batch, time, classes]"),
    ("CTCGreedyDecoder", [SCORES, LENGTH], {}, dict(top_shapes=[[1, 3, 1, 1]]),
     "the top must be [batch, N, 1, 1] with N at least the 4 time steps, the IR says [1, 3, 1, 1]"),
    ("CTCGreedyDecoder", [SCORES, typed([2, 3], "int32")], {}, dict(top_shapes=[[1, 4, 1, 1]]),
     "takes one sequence length per sample, got 2 for a batch of 1"),
    ("CTCGreedyDecoder", [SCORES, LENGTH], dict(merge_repeated="yes"), dict(top_shapes=[[1, 4, 1, 1]]),
     "merge_repeated must be true or false"),
]


@pytest.mark.parametrize("optype, inputs, params, extra, message", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_bad_params_are_one_line_errors(optype, inputs, params, extra, message):
    one_line_ir_error(optype, message, lambda: run(optype, inputs, params, **extra))


# through `npuopt --cfg`: op test -> (layer, param, bad value, the error's words)
CLI_ERRORS = {
    "bitshift": ("left", "direction", "UP", "layer 'left' (BitShift): unsupported direction 'UP'"),
    "bitwise": ("and", "method", "NAND", "layer 'and' (Bitwise): unsupported method 'NAND'"),
    "mod": ("fmod", "fmod", "2", "layer 'fmod' (Mod): fmod must be true or false, got 2"),
    "divmod": ("wide_floor", "mode", "ROUND", "layer 'wide_floor' (DivMod): unsupported mode 'ROUND'"),
    "parser_isinf_isnan": ("isinf_11", "detect_negative", "maybe", "layer 'isinf_11' (IsInf): detect_negative must be"),
    "ctc_greedy": ("merged", "layer_top_shape", "[[1,6,1,1]]", "layer 'merged' (CTCGreedyDecoder): the top must be"),
}


@pytest.mark.parametrize("case", CLI_ERRORS)
def test_bad_params_through_npuopt(case, tmp_path):
    npuopt_rejects(case, *CLI_ERRORS[case], tmp_path)


def test_npuopt_run_bad_params_are_one_line(tmp_path, capsys):
    npuopt_run_rejects([("bitshift", "right", "direction", "UP", "direction 'UP'"),
                        ("bitwise", "not", "method", "NAND", "method 'NAND'"),
                        ("mod", "mod", "scale_value", "[1]", "scale_value/shift_value must be"),
                        ("divmod", "narrow_trunc", "mode", "HALF", "mode 'HALF'"),
                        ("parser_isinf_isnan", "isinf_10", "detect_positive", "2", "detect_positive must be true or false"),
                        ("ctc_greedy", "unmerged", "merge_repeated", "5", "merge_repeated must be true or false")],
                       tmp_path, capsys)
