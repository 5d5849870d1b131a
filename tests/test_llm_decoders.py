"""What Llama-style decoders bring (issue 44): RotaryEmbedding (its float forward against a
NumPy reference written pair by pair, its bad params as one-line errors, its integer form
by hand in npuopt-run), attention masks of float32's lowest or -inf (left out of the
statistics, saturating when quantized), integer inputs beside float ones in npuopt-run,
and an Eltwise of an int32 mask. The decoders themselves are op tests
(op_tests/parser_llama_*, written by tools/parser_cases/llm.py through the parser):
op_tests/run.sh and tests/test_conformance.py run them."""
import shutil

import numpy as np
import pytest
import torch

from npuopt.dtype import Dtype
from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.compare import dequantized
from npuopt.quant.statistics import Statistics, histogram
from npuopt_run import cli

from conftest import REPO, edit_ir, run_in_process
from test_quantize_ops import quantize
from test_refrun import _compare_module, expect_error, int8_input, run_cli, write_qir

NEG = float(np.finfo(np.float32).min)


def build(inputs, params, constants=()):
    """One RotaryEmbedding over graph inputs x (float) and the rest (cos, sin, position_ids)."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(v.shape), v) for i, v in enumerate(inputs)]
    top = b.layer("RotaryEmbedding", "op", names, params, dict(constants))[0]
    return b.tensors[top].betensor


def rope_reference(x, cos, sin, positions, heads, rotary, interleaved):
    """Head by head, position by position, pair by pair (float64)."""
    four_d = x.ndim == 4
    xh = x if four_d else x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(0, 2, 1, 3)
    y = xh.astype(np.float64).copy()
    batch, n_heads, seq, head = xh.shape
    rotary = rotary or head
    for b in range(batch):
        for h in range(n_heads):
            for s in range(seq):
                p = positions[b if positions.shape[0] > 1 else 0, s]
                table_c = cos[min(b, cos.shape[0] - 1)] if cos.ndim == 3 else cos
                table_s = sin[min(b, sin.shape[0] - 1)] if sin.ndim == 3 else sin
                for i in range(rotary // 2):
                    j, k = (2 * i, 2 * i + 1) if interleaved else (i, i + rotary // 2)
                    a, c = float(xh[b, h, s, j]), float(xh[b, h, s, k])
                    y[b, h, s, j] = a * table_c[p, i] - c * table_s[p, i]
                    y[b, h, s, k] = a * table_s[p, i] + c * table_c[p, i]
    return y if four_d else y.transpose(0, 2, 1, 3).reshape(x.shape)


def angles(positions, width):
    a = np.outer(np.arange(positions), 1.0 / 10000 ** (np.arange(width) / width))
    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)


@pytest.mark.parametrize("shape, heads, rotary, interleaved, with_positions, batch_tables", [
    ((2, 5, 16), 2, 0, 0, True, False),     # ONNX Runtime's fused op: [B, S, hidden], positions
    ((2, 5, 16), 2, 4, 1, True, False),     # interleaved pairs of 4 of 8 values
    ((2, 5, 16), 4, 2, 0, False, False),    # no position_ids: 0..S-1
    ((2, 3, 5, 8), 0, 6, 0, True, False),   # [B, H, S, D]
    ((2, 5, 16), 2, 0, 1, False, True),     # cos/sin [B, S, D/2] already at the positions
])
def test_rotary_embedding_against_reference(shape, heads, rotary, interleaved, with_positions, batch_tables):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    head = shape[-1] if len(shape) == 4 else shape[-1] // heads
    cos, sin = angles(12, (rotary or head) // 2 + 1)      # one column more than used
    seq = shape[-2]
    positions = rng.integers(-12, 12, (shape[0], seq))    # negative ones count from the end
    if batch_tables:
        cos, sin = np.stack([cos[:seq], cos[3:3 + seq]]), np.stack([sin[:seq], sin[3:3 + seq]])
    params = dict(interleaved=interleaved, rotary_embedding_dim=rotary)
    if heads:
        params["num_heads"] = heads
    inputs = [torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin)]
    if with_positions:
        inputs.append(torch.from_numpy(positions.astype(np.int32)))
    got = build(inputs, params).numpy()
    want_positions = positions % cos.shape[-2] if with_positions else np.arange(seq)[None]
    want = rope_reference(x, cos, sin, want_positions, heads, rotary, interleaved)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


X3 = torch.zeros(1, 4, 16)
COS = torch.ones(8, 4)
POS = torch.zeros(1, 4, dtype=torch.int32)


@pytest.mark.parametrize("inputs, params, words", [
    ([X3, COS, COS, POS], dict(num_heads=3), "num_heads 3 does not divide the hidden size 16"),
    ([X3, COS, COS, POS], dict(num_heads=0), "num_heads must be at least 1"),
    ([X3, COS, COS, POS], dict(num_heads=2, rotary_embedding_dim=7), "rotary_embedding_dim 7 must be even"),
    ([X3, COS, COS, POS], dict(num_heads=2, rotary_embedding_dim=10), "at most the head size 8"),
    ([X3, COS, COS, POS], dict(num_heads=2, interleaved=2), "interleaved must be true or false"),
    ([X3, COS], dict(num_heads=2), "takes 3 or 4 inputs"),
    ([X3, COS, torch.ones(8, 3), POS], dict(num_heads=2), "cos [8, 4] and sin [8, 3] must be alike"),
    ([X3, torch.ones(8, 3), torch.ones(8, 3), POS], dict(num_heads=2), "width at least 4"),
    ([X3, COS, COS, torch.zeros(1, 3, dtype=torch.int32)], dict(num_heads=2), "position_ids [1, 3] must be"),
    ([X3, COS, COS, torch.full((1, 4), 8, dtype=torch.int32)], dict(num_heads=2), "position_ids [8, 8] out of range"),
    ([torch.zeros(4, 16), COS, COS], dict(num_heads=2), "got 2-D"),
])
def test_rotary_embedding_bad_params_are_one_line_errors(inputs, params, words):
    with pytest.raises(IRError, match=r"layer 'op' \(RotaryEmbedding\)") as e:
        build(inputs, params)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key, value, words", [("rotary_embedding_dim", "5", "rotary_embedding_dim 5 must be even"),
                                               ("num_heads", "3", "num_heads 3 does not divide")])
def test_rotary_embedding_bad_params_stop_npuopt(tmp_path, key, value, words):
    """`npuopt --cfg` on the parser's RotaryEmbedding with one bad param: one line, nothing written."""
    folder = tmp_path / "parser_rope_ms"
    shutil.copytree(REPO / "op_tests" / "parser_rope_ms", folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / "parser_rope_ms.txt", "out", key, value)
    result = run_in_process("--cfg", folder / "opt.cfg")
    errors = [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert len(errors) == 1 and "layer 'out' (RotaryEmbedding)" in errors[0] and words in errors[0], result.stderr
    assert not (folder / "work").exists()


# ---- npuopt-run: the integer form by hand, and inputs of both kinds ---------------------------------
def rope_qir(tmp_path, rotary, not_rotate):
    """x int8 [1, 1, 1, 4] (B, H, S, D) = [10, -6, 4, 8]; cos row [2, 3], sin row [4, -1] (constants)."""
    table = dict(type="Constant", shapes=[[1, 2]], types=["int8"], scales=[127.0], zps=[0])
    layers = [int8_input("x", [1, 1, 1, 4]),
              dict(table, name="cos", tops=["cos"], consts={"weights": ("int8", [[2, 3]])}),
              dict(table, name="sin", tops=["sin"], consts={"weights": ("int8", [[4, -1]])}),
              dict(name="rope", type="RotaryEmbedding", bottoms=["x", "cos", "sin"], tops=["rope"],
                   shapes=[[1, 1, 1, 4]], types=["int8"], scales=[1.0], zps=[0],
                   params=dict(num_heads=1, interleaved=0, rotary_embedding_dim=rotary, rotate_rescale_cos=0.5,
                               rotate_rescale_sin=0.25, not_rotate_rescale=not_rotate))]
    return write_qir(tmp_path, layers, ["x"], ["rope"])


@pytest.mark.parametrize("rotary, not_rotate, want", [
    # pairs (10, 4), (-6, 8): real = c a / 2 - t b / 4, imag = t a / 4 + c b / 2 -> 6, -7 | 14, 13.5 -> 14
    (0, 1.0, [6, -7, 14, 14]),
    # one pair (10, -6): 10 + 6 = 16, 10 - 6 = 4; the rest times 1.5
    (2, 1.5, [16, 4, 6, 12]),
])
def test_rotary_embedding_integers_by_hand(tmp_path, rotary, not_rotate, want):
    txt = rope_qir(tmp_path, rotary, not_rotate)
    np.save(tmp_path / "x.npy", np.array([10, -6, 4, 8], np.int8).reshape(1, 1, 1, 4))
    out = tmp_path / "out.npz"
    assert run_cli([txt, "--input", str(tmp_path / "x.npy"), "--integer-input", "-o", str(out)]) == 0
    assert np.load(out)["rope"].ravel().tolist() == want


def test_token_ids_beside_float_inputs(capsys, tmp_path):
    """An input of scale 1 and zero point 0 (token ids) takes integer arrays as they are and a
    scaled one takes floats, in one run with no flag; a scaled input's integers need
    --integer-input, which then takes no float array for it."""
    gather = dict(name="emb", type="Gather", bottoms=["table", "ids"], tops=["emb"], shapes=[[1, 2, 3]],
                  types=["int8"], scales=[2.0], zps=[0], params=dict(axis=0, batch_dims=0))
    add = dict(name="add", type="Eltwise", bottoms=["emb", "h"], tops=["add"], shapes=[[1, 2, 3]], types=["int8"],
               scales=[2.0], zps=[0], params=dict(method="ADD", with_activation="NONE", scale_value=[1, 1, 1],
                                                  shift_value=0))
    table = dict(name="table", type="Constant", tops=["table"], shapes=[[4, 3]], types=["int8"], scales=[2.0],
                 zps=[0], consts={"weights": ("int8", np.arange(12).reshape(4, 3))})
    txt = write_qir(tmp_path, [int8_input("ids", [1, 2], dtype="int32"), int8_input("h", [1, 2, 3], scale=2.0),
                               table, gather, add], ["ids", "h"], ["add"])
    np.save(tmp_path / "ids.npy", np.array([[3, 1]], np.int64))
    np.save(tmp_path / "h.npy", np.full((1, 2, 3), 0.5, np.float32))       # 1 on the grid of scale 2
    np.save(tmp_path / "hq.npy", np.full((1, 2, 3), 1, np.int8))
    out = tmp_path / "out.npz"
    want = (np.arange(12).reshape(4, 3)[[3, 1]] + 1).tolist()
    for h, extra in (("h.npy", []), ("hq.npy", ["--integer-input"])):
        assert run_cli([txt, "--input", str(tmp_path / "ids.npy"), "--input", str(tmp_path / h), "-o", str(out),
                        *extra]) == 0
        assert np.load(out)["add"][0].tolist() == want, (h, extra)
    expect_error(capsys, [txt, "--input", str(tmp_path / "ids.npy"), "--input", str(tmp_path / "hq.npy"), "-o",
                          str(out)], "input 'h'", "--integer-input")
    expect_error(capsys, [txt, "--input", str(tmp_path / "ids.npy"), "--input", str(tmp_path / "h.npy"), "-o",
                          str(out), "--integer-input"], "input 'h'", "needs an integer array")


def test_refrun_help_names_the_token_ids():
    assert "token ids" in cli.build_parser().format_help()


# ---- attention masks --------------------------------------------------------------------------------
def test_masked_values_are_left_out_of_statistics():
    """float32's lowest, -1e9 and -inf (a mask's "minus infinity") are left out, silently; NaN and
    +Inf are counted as before."""
    s = Statistics(bins=64)
    s.update(torch.tensor([NEG, -3.0, 2.0, float("-inf"), -1e9]))
    s.update(torch.tensor([float("nan"), 1.0, float("inf")]))
    assert (s.min, s.max, s.count, s.nonfinite) == (-3.0, 2.0, 3, 2)
    per_channel = Statistics(bins=8, axis=-1)
    per_channel.update(torch.tensor([[NEG, 1.0], [-2.0, float("-inf")]]))
    assert per_channel.min.tolist() == [-2.0, 1.0] and per_channel.max.tolist() == [-2.0, 1.0]


def test_histogram_of_a_range_near_float32s_largest_is_histcs():
    """The bins' float32 steps would overflow (the bincount of the issue): histc counts them."""
    x = torch.tensor([NEG, NEG / 2, -5.0, 0.0, 3.0], dtype=torch.float32)
    got = histogram(x, 2048, NEG, 3.0, NEG, 3.0)
    assert torch.equal(got, torch.histc(x, 2048, NEG, 3.0).double())


def test_masks_quantize_to_the_bottom_of_the_grid():
    """A Constant mask of 0, float32's lowest and -inf added to scores, then Softmax: the
    sum's grid is that of its unmasked values, the masked positions saturate at its lowest integer, and the
    quantized softmax gives them (nearly) nothing, as the float one gives them nothing."""
    b = GraphBuilder("mask")
    x = b.input("scores", [1, 2, 3])
    mask = b.layer("Constant", "mask", [], {}, {"weights": torch.tensor([[0.0, NEG, float("-inf")]] * 2)})[0]
    scores = b.layer("Eltwise", "add", [x, mask], dict(method="ADD", with_activation="NONE"))[0]
    graph = b.build(b.layer("Softmax", "softmax", [scores], dict(axis=-1)))
    torch.manual_seed(0)
    data = [[torch.randn(4, 2, 3) * 3] for _ in range(2)]
    qg = quantize(graph, data)
    masked = qg.tensor(scores)
    reach = max(float(d[0][..., 0].abs().max()) for d in data)     # of the sum's only unmasked values
    assert float(masked.scale) * reach == pytest.approx(127, rel=0.01)
    # a masked value weighs as a score at the bottom of the grid, -reach: next to scores of 0 or more, little
    test_in = torch.randn(4, 2, 3) * 3
    test_in[..., 0] = test_in[..., 0].clamp(0, reach)
    qg.forward([test_in], keep_tensors=True)
    assert bool((masked.betensor[..., 1:] == masked.qmin).all())
    probabilities = dequantized(qg.output_tensors[0], qg.output_tensors[0].betensor)
    assert float(probabilities[..., 1:].max()) < 0.01
    assert torch.allclose(probabilities[..., 0], torch.ones(4, 2), atol=0.01)


def test_eltwise_of_an_int32_mask():
    """1 - mask, the mask an int32 input of 0/1 cast to float (the parser's Cast): the int32
    tensor's branch multiplier is bounded by its calibrated values, not by 2^31."""
    b = GraphBuilder("pad")
    m = b.input("mask", [1, 6], dtype=Dtype.INT32)
    flt = b.layer("Cast", "cast", [m], dict(to_dtype="float32", clip_mode="TRUNCATION", ignore_scale_zp=True))[0]
    one = b.layer("Constant", "one", [], {}, {"weights": torch.tensor(1.0)})[0]
    graph = b.build(b.layer("Sub", "sub", [one, flt], dict(with_activation="NONE")))
    data = [[torch.randint(0, 2, (4, 6), dtype=torch.int32)] for _ in range(2)]
    qg = quantize(graph, data)
    test_in = torch.randint(0, 2, (4, 6), dtype=torch.int32)
    got = dequantized(qg.output_tensors[0], qg.forward([test_in])[0])
    assert torch.allclose(got, 1.0 - test_in.float(), atol=0.01)


# ---- the parser-written decoders in npuopt-run, weight-only 4-bit ------------------------------------
WEIGHT_ONLY_B32 = {"trigger_float_op": "disable & <[FullyConnected]:float16_act_int_wht>", "weight_bits": "4",
                   "quantize_method_for_weight": "per_channel_symmetric_restricted_range & "
                                                 "<[FullyConnected]:per_block_asymmetric>",
                   "weight_block_size": "32"}


@pytest.mark.parametrize("case", ["parser_llama_prefill", "parser_llama_decode", "parser_llama_fused_rope_decode"])
def test_parser_decoders_weight_only_in_refrun(tmp_path, case):
    """The decoders with 4-bit FullyConnected weights in blocks of 32 (the conformance setting
    weight_only_fc_b32; op_tests' run.sh covers the defaults): npuopt-run computes every
    tensor as npuopt does."""
    folder = tmp_path / case
    shutil.copytree(REPO / "op_tests" / case, folder, ignore=shutil.ignore_patterns("work"))
    passed, line = _compare_module().run_case(str(folder), WEIGHT_ONLY_B32)
    assert passed, line
