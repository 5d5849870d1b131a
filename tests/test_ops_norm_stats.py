"""LRN, Normalization, Moments, LogSoftmax: float forwards against PyTorch, the one-line
errors for impossible params, integer outputs close to the float ones, and the layers
the tool chain's format cannot hold staying float. Bit-exactness against the tool chain
is tests/test_conformance.py's job (op cases lrn*, normalization*, moments*, logsoftmax*)."""
import math

import pytest
import torch
import torch.nn.functional as F

from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt.ops._rsqrt import rsqrt_15
from npuopt.quant.compare import dequantized
from tests.test_ops_float import close, nhwc, run
from tests.test_ops_norm import spread_channels
from tests.test_quantize_ops import METHODS, check, one_layer, quantize


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---- float --------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn_across_channels_is_torchs(size):
    x = torch.randn(2, 7, 4, 5)
    got = run("LRN", [nhwc(x)], dict(method="ACROSS_CHANNELS", size=size, bias=1.5, alpha=0.3, beta=0.6))
    close(got, nhwc(F.local_response_norm(x, size, alpha=0.3, beta=0.6, k=1.5)), 1e-5)


def test_lrn_defaults_and_lower_case_method():
    x = torch.randn(2, 6, 3, 3) * 20
    got = run("LRN", [nhwc(x)], dict(method="across_channels", size=3))
    close(got, nhwc(F.local_response_norm(x, 3, alpha=1e-4, beta=0.75, k=1.0)), 1e-5)


def test_lrn_within_channel_counts_only_the_pixels_inside():
    x = torch.randn(2, 3, 5, 4)
    got = run("LRN", [nhwc(x)], dict(method="WITHIN_CHANNEL", size=3, bias=1.0, alpha=0.5, beta=0.75))
    ones = torch.ones(1, 1, 5, 4)
    count = F.conv2d(F.pad(ones, (1, 1, 1, 1)), torch.ones(1, 1, 3, 3))
    mean = F.conv2d(F.pad((x * x).reshape(6, 1, 5, 4), (1, 1, 1, 1)), torch.ones(1, 1, 3, 3)).reshape(2, 3, 5, 4) / count
    close(got, nhwc(x / (1.0 + 0.5 * mean) ** 0.75), 1e-5)


@pytest.mark.parametrize("method,p", [("L2", 2), ("l1", 1)])
@pytest.mark.parametrize("axis", [[2], [1, 2], [-1]])
def test_normalization(method, p, axis):
    x = torch.randn(2, 4, 6)
    got = run("Normalization", [x], dict(method=method, axis=axis, epsilon=1e-12))
    close(got, x / x.abs().pow(p).sum(axis, keepdim=True).pow(1 / p), 1e-5)


def test_normalization_epsilon_floors_the_sum():
    """An all-zero row gives 0 (epsilon 0 means float32's epsilon); a small sum is floored
    at epsilon before its root."""
    x = torch.zeros(1, 2, 3)
    x[0, 1] = torch.tensor([0.01, 0.0, 0.0])
    got = run("Normalization", [x], dict(method="L2", axis=[2], epsilon=0.0))
    assert torch.equal(got[0, 0], torch.zeros(3))
    got = run("Normalization", [x], dict(method="L2", axis=[2], epsilon=1.0))
    close(got[0, 1], torch.tensor([0.01, 0.0, 0.0]))


@pytest.mark.parametrize("axis,keep", [([1, 2], True), ([3], False), ([-1, 1], False)])
def test_moments(axis, keep):
    x = torch.randn(2, 3, 4, 5) * 2 + 1
    mean, var = run("Moments", [x], dict(axis=axis, keepdims=keep), n_tops=2)
    close(mean, x.mean(axis, keepdim=keep))
    close(var, x.var(axis, unbiased=False, keepdim=keep))


@pytest.mark.parametrize("axis", [-1, 1])
def test_logsoftmax(axis):
    x = torch.randn(2, 5, 7) * 3
    close(run("LogSoftmax", [x], dict(axis=axis)), torch.log_softmax(x, axis))


# ---- errors -------------------------------------------------------------------
@pytest.mark.parametrize("optype,params,message", [
    ("LRN", dict(size=0), "'op' \\(LRN\\): size 0 must be a positive integer"),
    ("LRN", dict(size=-3), "size -3 must be"),
    ("LRN", dict(size=2.5), "size 2.5 must be"),
    ("LRN", dict(size=3, method="FOO"), "'op' \\(LRN\\): method FOO is not one of ACROSS_CHANNELS, WITHIN_CHANNEL"),
    ("LRN", dict(size=3, alpha="x"), "alpha 'x' must be a number"),
    ("LRN", dict(size=2, method="WITHIN_CHANNEL"), "WITHIN_CHANNEL .* even size \\(2\\) is not supported yet"),
    ("Normalization", dict(method="L3", axis=[3]), "'op' \\(Normalization\\): method L3 is not one of L1, L2"),
    ("Normalization", dict(method="L2", axis=[4]), "'op' \\(Normalization\\): axis \\[4\\] must name axes"),
    ("Normalization", dict(method="L2", axis=[1], epsilon=-1.0), "epsilon -1.0 must be a number >= 0"),
    ("Moments", dict(axis=[5]), "'op' \\(Moments\\): axis \\[5\\] must name axes"),
    ("Moments", dict(axis=[1], keepdims="maybe"), "'op' \\(Moments\\): keepdims 'maybe' must be true or false"),
    ("LogSoftmax", dict(axis=4), "'op' \\(LogSoftmax\\): axis 4 out of range for a 4-D input"),
])
def test_impossible_params(optype, params, message):
    with pytest.raises(IRError, match=message):
        run(optype, [torch.randn(2, 3, 4, 6)], params, n_tops=2 if optype == "Moments" else 1)


# ---- integer helpers ------------------------------------------------------------
@pytest.mark.parametrize("s", [0, 1, 5, 1000, 2 ** 31 - 1, 2 ** 31, 3 * 2 ** 33 + 12345, 2 ** 40])
def test_rsqrt_15_holds_the_inverse_root_of_any_sum(s):
    """r * 2^-(31 - t) ~ 1 / sqrt(S), r within 15 bits, also for sums beyond 31 bits."""
    r, t = rsqrt_15(torch.tensor([s], dtype=torch.int64))
    assert 0 < int(r) < 2 ** 15
    assert math.isclose(int(r) * 2.0 ** (int(t) - 31), 1 / math.sqrt(max(s, 1)), rel_tol=2e-3 if s else 1.0)


# ---- quantized ----------------------------------------------------------------
def assert_quantized(qg, optype, want=True):
    assert [n.quantized for n in qg.nodes if n.type == optype] == [want]


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("size", [5, 2])
def test_lrn_integers_are_close(tmp_path, mode, size):
    g = one_layer("LRN", [(4, 4, 8)], dict(method="ACROSS_CHANNELS", size=size, bias=1.0, alpha=0.5, beta=0.75))
    data = [(spread_channels(4, 4, 8),) for _ in range(3)]
    assert_quantized(check(g, data, tmp_path, tol_lsb=3, **METHODS[mode])[0], "LRN")


@pytest.mark.parametrize("params,mode", [(dict(method="WITHIN_CHANNEL", size=3), 0),
                                         (dict(method="ACROSS_CHANNELS", size=3), 2)])
def test_lrn_forms_the_format_cannot_hold_stay_float(params, mode):
    """WITHIN_CHANNEL (the tool chain divides by size, not by the window's pixels) and
    16-bit inputs (the tool chain sums 32-bit squares in float32)."""
    g = one_layer("LRN", [(4, 4, 8)], dict(params, bias=1.0, alpha=0.5, beta=0.75))
    qg = quantize(g, [(spread_channels(4, 4, 8),) for _ in range(2)], **METHODS[mode])
    assert_quantized(qg, "LRN", False)


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("method,axis", [("L2", [3]), ("L2", [1, 2]), ("L1", [3])])
def test_normalization_integers_are_close(tmp_path, mode, method, axis):
    g = one_layer("Normalization", [(4, 4, 8)], dict(method=method, axis=axis, epsilon=1e-12))
    data = [(spread_channels(4, 4, 8),) for _ in range(3)]
    # L1 divides x * M (an 8-bit M ~ s_out) by the row's sum and truncates: one step of
    # 2^-s_out * 2^s per element; L2 at 16 bits holds x * M and 1 / ||x|| in 16 and 15
    # bits: ~2^-13 of the output (the tool chain's format)
    tol = dict(tol_lsb=4, tol_abs=0.05 if method == "L1" else 2.0 ** -12)
    assert_quantized(check(g, data, tmp_path, **tol, **METHODS[mode])[0], "Normalization")


def quantized_outputs(g, data, **settings):
    qg = quantize(g, data, **settings)
    test_in = list(data[-1])
    want = g.forward(test_in)
    got = qg.forward(test_in)
    return qg, want, [dequantized(t, y.clone()) for t, y in zip(qg.output_tensors, got)]


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("axis,keep", [([1, 2], True), ([3], False)])
def test_moments_integers_are_close(mode, axis, keep):
    b = GraphBuilder("t")
    x = b.input("in0", [1, 4, 4, 8])
    g = b.build(b.layer("Moments", "op", [x], dict(axis=axis, keepdims=keep), n_tops=2))
    data = [(spread_channels(4, 4, 8),) for _ in range(3)]
    qg, (mean, var), (qmean, qvar) = quantized_outputs(g, data, **METHODS[mode])
    assert_quantized(qg, "Moments")
    mean_t, var_t = qg.output_tensors
    assert mean_t.scale == qg.input_tensors[0].scale and var_t.zerop == 0 and not var_t.dtype.is_signed
    assert (qmean - mean).abs().max() <= 1.0 / mean_t.scale
    assert (qvar - var).abs().max() <= 2.0 / var_t.scale


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("axis", [-1, 1])
def test_logsoftmax_integers_are_close(tmp_path, mode, axis):
    """Close where the softmax is at least 1/16: the log table is read at p = softmax *
    (2^bits - 1), so smaller probabilities are coarse (the tool chain's format)."""
    g = one_layer("LogSoftmax", [(4, 4, 8)], dict(axis=axis))
    data = [(spread_channels(4, 4, 8) * 2,) for _ in range(3)]
    qg, (want,), (got,) = quantized_outputs(g, data, **METHODS[mode])
    assert_quantized(qg, "LogSoftmax")
    out_t = qg.output_tensors[0]
    assert out_t.dtype.is_signed
    near = want > math.log(1 / 16)
    assert near.any()
    assert (got - want)[near].abs().max() <= max(4.0 / out_t.scale, 0.07)


# ---- forms only the tool chain writes ----------------------------------------------
def _hand_ir(tmp_path, layer):
    from tests.test_refrun import int8_input, write_qir
    return write_qir(tmp_path, [dict(int8_input("x", [1, 3, 4, 8], scale=8.0), ranges=[[-128, 127]]), layer],
                     ["x"], [layer["name"]])


def _npuopt_and_refrun(tmp_path, txt, x, top):
    from npuopt.ir import read_graph
    from tests.test_refrun import run_qir
    status, out = run_qir(tmp_path, txt, x)
    assert status == 0
    graph = read_graph(txt)
    graph.forward([torch.from_numpy(x.astype("float32") / 8.0)], keep_tensors=True)
    return graph.tensor(top).betensor.numpy().astype("int64"), out[top].astype("int64")


def test_logsoftmax_float_table_form(tmp_path):
    """The tool chain's default (X2) form: a float32 exp table, quantize_scale [c0, c1]; out =
    round(d * c0 - log(sum exp) * c1) - zp in float32. npuopt and npuopt-run agree with each
    other and with the float64 formula within one step."""
    import numpy as np
    s_in, s_out = 8.0, 7.9375
    table = np.exp((np.arange(256) - 255) / s_in).astype(np.float32)
    layer = dict(name="ls", type="LogSoftmax", bottoms=["x"], tops=["ls"], shapes=[[1, 3, 4, 8]], types=["int8"],
                 ranges=[[-128, 127]], scales=[s_out], zps=[0], consts={"lut_exp": ("float32", table)},
                 params=dict(axis=3, quantize_scale=[s_out / s_in, s_out], scale_value=1, shift_value=0))
    x = np.random.default_rng(5).integers(-128, 128, size=[2, 3, 4, 8]).astype(np.int8)
    ours, refrun = _npuopt_and_refrun(tmp_path, _hand_ir(tmp_path, layer), x, "ls")
    np.testing.assert_array_equal(ours, refrun)
    want = np.clip(np.rint(torch.log_softmax(torch.from_numpy(x / s_in), 3).numpy() * s_out), -128, 127)
    assert np.abs(ours - want).max() <= 1 and len(np.unique(ours)) > 20


def test_lrn_within_channel_as_the_tool_chain_writes_it(tmp_path):
    """WITHIN_CHANNEL quantized (npuopt keeps it float, the tool chain writes it): W = the sum
    of x^2 over the 3x3 window (zeros outside), a = R(W, 1, 4), g = lut[a] (16 index bits over
    256 entries, interpolated), out = R(x * g, 1, 16)."""
    import numpy as np
    table = (65535 - np.arange(256) * 200).astype(np.uint16)
    layer = dict(name="lrn", type="LRN", bottoms=["x"], tops=["lrn"], shapes=[[1, 3, 4, 8]], types=["int8"],
                 ranges=[[-128, 127]], scales=[8.0], zps=[0], consts={"lut": ("uint16", table)},
                 params=dict(method="WITHIN_CHANNEL", size=3, bias=1.0, alpha=0.1, beta=0.75, scale_sum_value=1,
                             shift_sum_value=4, scale_value=1, shift_value=16))
    x = np.random.default_rng(6).integers(-128, 128, size=[2, 3, 4, 8]).astype(np.int8)
    ours, refrun = _npuopt_and_refrun(tmp_path, _hand_ir(tmp_path, layer), x, "lrn")
    np.testing.assert_array_equal(ours, refrun)
    sq = np.pad(x.astype(np.int64) ** 2, [(0, 0), (1, 1), (1, 1), (0, 0)])
    w = sum(sq[:, i:i + 3, j:j + 4] for i in range(3) for j in range(3))
    a = np.clip(np.rint(w / 16.0), 0, 65535).astype(np.int64)
    t = np.append(table.astype(np.int64), table[-1])
    g = t[a >> 8] + (((t[(a >> 8) + 1] - t[a >> 8]) * (a & 255)) >> 8)
    np.testing.assert_array_equal(ours, np.clip(np.rint(x * g / 65536.0), -128, 127))
