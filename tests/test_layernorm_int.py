"""Integer LayerNorm (docs/integer-semantics.md, "LayerNorm"): integer outputs in the
dtype's range, close to float LayerNorm, bit-exact save/reload, the doc's formula
recomputed here with Python integers, agreement with the reference runner (npuopt-run),
the stored numbers in use, and the float-kept variant (trigger_float_op)."""
import math
import re

import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.layers import QuantSettings
from npuopt.quant.quantizer import Calibrator, attach_statistics, build_quantized_graph, float_layers
from tests.test_quantize_ops import METHODS, batches, check, one_layer, perturbed_output, quantize
from tests.test_quantize_ops_more import ASYM, assert_multiplier_matters, output_stage, run_keep, shifted, weights_of
from tools.refrun.errors import RefrunError
from tools.refrun.irfile import read_model
from tools.refrun.runner import Runner


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def normalized(shape, axis):
    """The normalized sizes of an input [batch] + shape."""
    return [shape[a % (len(shape) + 1) - 1] for a in axis]


def ln_graph(shape, axis, eps=1e-5, gamma_lo=0.2):
    norm = normalized(shape, axis)
    gamma = torch.rand(*norm) * 1.5 + gamma_lo
    return one_layer("LayerNorm", [shape], dict(axis=axis, epsilon=eps),
                     {"weights": gamma, "biases": torch.randn(*norm) * 0.3})


def rows_of(shape, n=3, batch=4, min_spread=0.5):
    """Rows with their own offset and spread (LayerNorm removes both). A row's spread
    is kept well above the input's LSB: LayerNorm divides the input's quantization
    error by the row's standard deviation."""
    out = []
    for _ in range(n):
        x = torch.rand(batch, *shape) * 4 - 2
        x = x * (torch.rand(batch, shape[0], *([1] * (len(shape) - 1))) * (1 - min_spread) + min_spread)
        out.append((x + torch.rand(batch, shape[0], *([1] * (len(shape) - 1))) * 2 - 1,))
    return out


def py_rrs(v: int, s: int) -> int:
    return (v + (1 << (s - 1))) >> s if s > 0 else v


def doc_layernorm(node):
    """The doc's integers, in Python integers, from the stored numbers only."""
    x_t, out_t = node.inputs[0], node.outputs[0]
    first = min(a % x_t.betensor.dim() for a in node.params["axis"])
    count = math.prod(x_t.betensor.shape[first:])
    p, e, f = (int(node.params[k]) for k in ("norm_shift", "variance_bias", "norm_bits"))
    w = weights_of(node).reshape(-1).tolist()
    w = w * count if len(w) == 1 else w
    b = node.constants["biases"].betensor.reshape(-1).tolist()
    rows = []
    for row in shifted(x_t).reshape(-1, count).tolist():
        total = sum(row)
        u = [py_rrs(count * a - total, p) for a in row]
        v = max(sum(t * t for t in u) + e, 1)
        j = 0
        while v * 4 ** (j + 1) < 2 ** 62:
            j += 1
        r = math.isqrt(v * 4 ** j)
        n = [(2 * t * 2 ** (j + f) + r) // (2 * r) for t in u]
        rows.append([n_i * w_i + b_i for n_i, w_i, b_i in zip(n, w, b)])
    return output_stage(node, torch.tensor(rows, dtype=torch.int64), out_t).reshape(x_t.betensor.shape)


def refrun_outputs(path, test_in):
    runner = Runner(read_model(str(path)))
    values = runner.run(runner.prepare_inputs([x.numpy() for x in test_in], integer_input=False))
    return values


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("shape,axis", [((5, 32), [2]), ((3, 4, 6), [2, 3]), ((2, 3), [-1])])
def test_layernorm_is_integer_close_exact_and_reloads(tmp_path, mode, shape, axis):
    g = ln_graph(shape, axis)
    data = rows_of(shape)
    per_channel = METHODS[mode]["quantize_method_for_weight"].startswith("per_channel")
    # per-tensor 8-bit gamma costs up to max|gamma|/254 per unit of the normalized value
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=2.0, min_cos=0.999, **METHODS[mode])
    node = qg.node("op")
    assert node.quantized and node.outputs[0].dtype.is_integer
    count = math.prod(normalized(shape, axis))
    assert node.constants["weights"].betensor.shape == (count,)
    assert node.constants["biases"].betensor.dtype == torch.int32
    assert ("scale" in node.constants) == per_channel
    test_in = list(data[-1])
    got = run_keep(qg, test_in)
    assert torch.equal(got.long(), doc_layernorm(node))
    # the reference runner reads the same numbers from the written IR
    runner = refrun_outputs(path, test_in)
    assert np.array_equal(runner["op"], got.long().numpy())


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("count", [4, 64, 768])
def test_layernorm_error_within_an_lsb_or_two(bits, count):
    """Against float LayerNorm: within 2 output LSB (per-element gamma at 16 bits, where an
    8-bit per-tensor gamma alone would cost more); the arithmetic alone (float LayerNorm
    on the dequantized input, gamma and beta) within 1 LSB plus the multiplier's 2^-15."""
    g = ln_graph((5, count), [2])
    data = rows_of((5, count))
    method = "per_channel_symmetric_restricted_range" if bits == 16 else "per_tensor_symmetric_restricted_range"
    qg = quantize(g, data, activation_bits=bits, quantize_method_for_weight=method)
    test_in = list(data[-1])
    want = g.forward(test_in)[0].double()
    got = qg.forward(test_in, keep_tensors=True)[0]
    node = qg.node("op")
    x_t, out_t, w_t = node.inputs[0], node.outputs[0], node.constants["weights"]
    deq = (got.double() + out_t.zerop) / out_t.scale
    assert float((deq - want).abs().max()) * out_t.scale <= 2.0
    s_w = torch.as_tensor(w_t.scale, dtype=torch.float64)
    s_n = 2.0 ** node.params["norm_bits"] / math.sqrt(count)
    ref = torch.nn.functional.layer_norm((x_t.betensor.double() + x_t.zerop) / x_t.scale, (count,),
                                         w_t.betensor.double() / s_w,
                                         node.constants["biases"].betensor.double() / (s_n * s_w), 1e-5)
    assert float((deq - ref).abs().max()) * out_t.scale <= 1.0 + out_t.dtype.qmax * 2.0 ** -15


def test_large_rows_at_16_bits_use_a_norm_shift_and_stay_exact(tmp_path):
    """N = 2048 at 16 bits: sum (N*A - S)^2 may pass 2^61, so norm_shift > 0; npuopt, the
    doc's formula and the runner still agree."""
    g = ln_graph((2, 2048), [2])
    data = [tuple(x * 3 for x in d) for d in rows_of((2, 2048), n=2, batch=2)]
    qg = quantize(g, data, activation_bits=16, **ASYM)
    node = qg.node("op")
    assert node.params["norm_shift"] > 0
    test_in = list(data[-1])
    got = run_keep(qg, test_in)
    assert torch.equal(got.long(), doc_layernorm(node))
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert torch.equal(read_graph(str(path)).forward(test_in)[0], got)
    assert np.array_equal(refrun_outputs(path, test_in)["op"], got.long().numpy())


def test_a_constant_row_gives_the_biases(tmp_path):
    """Variance 0: u = 0, n = 0, z = biases."""
    g = ln_graph((3, 8), [2])
    qg = quantize(g, rows_of((3, 8)))
    x = torch.full((1, 3, 8), 0.7)
    got = qg.forward([x], keep_tensors=True)[0].long()
    node = qg.node("op")
    z = node.constants["biases"].betensor.long().expand(3, 8)
    assert torch.equal(got[0], output_stage(node, z, node.outputs[0]))


def test_the_stored_numbers_are_used(tmp_path):
    g = ln_graph((4, 16), [2], eps=1e-2)
    data = rows_of((4, 16))
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=2.0)
    test_in = list(data[-1])
    base = back.forward(test_in)[0].clone()
    node = qg.node("op")
    original = path.read_text()
    for key, new in (("norm_bits", node.params["norm_bits"] - 1), ("norm_shift", 12),
                     ("variance_bias", node.params["variance_bias"] * 50 + 10 ** 6)):
        changed = perturbed_output(path, test_in, rf"^{key}=\d+", f"{key}={new}")
        assert not torch.equal(changed, base), key
        path.write_text(original)
    binary = path.with_suffix(".bin").read_bytes()
    offset = int(re.search(r"^biases_offset=(\d+)", original, re.M).group(1))
    raw = bytearray(binary)
    raw[offset + 3] ^= 0x40                                        # biases[0] += or -= 2^30
    path.with_suffix(".bin").write_bytes(bytes(raw))
    assert not torch.equal(read_graph(str(path)).forward(test_in)[0], base)
    path.with_suffix(".bin").write_bytes(binary)
    assert torch.equal(read_graph(str(path)).forward(test_in)[0], base)
    assert_multiplier_matters(back, path, test_in)


@pytest.mark.parametrize("key,value", [("norm_bits", 31), ("norm_shift", -1), ("variance_bias", 1.5)])
def test_out_of_range_numbers_are_refused_by_both(tmp_path, key, value):
    g = ln_graph((2, 8), [2])
    data = rows_of((2, 8))
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=2.0)
    text = re.sub(rf"^{key}=.*$", f"{key}={value}", path.read_text(), count=1, flags=re.M)
    path.write_text(text)
    with pytest.raises(IRError, match=f"layer 'op'.*{key}"):
        read_graph(str(path)).forward(list(data[-1]))
    with pytest.raises(RefrunError, match=f"layer 'op'.*{key}"):
        refrun_outputs(path, list(data[-1]))


def test_trigger_float_op_keeps_layernorm_in_float():
    b = GraphBuilder("t")
    b.input("x", [1, 6, 8])
    b.layer("FullyConnected", "fc", ["x"], dict(num_output=8), {"weights": torch.randn(8, 8) * 0.4,
                                                                "biases": torch.randn(8) * 0.1})
    b.layer("LayerNorm", "ln", ["fc"], dict(axis=[2], epsilon=1e-5), {"weights": torch.rand(8) + 0.5,
                                                                       "biases": torch.randn(8) * 0.1})
    g = b.build(["ln"])
    data = batches((6, 8), n=3)
    attach_statistics(g, Calibrator(g, 512, 0.9).run([list(d) for d in data]))
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema",
                                      trigger_float_op=n.name == "ln") for n in g.nodes}
    qg, kept = build_quantized_graph(g, settings, float_layers(g, settings))
    assert kept == {"ln"} and not qg.node("ln").quantized and qg.node("fc").quantized
    types = [n.type for n in qg.nodes]
    assert "DeQuantize" in types
    want = g.forward(list(data[-1]))[0]
    got = qg.forward(list(data[-1]))[0]
    assert got.dtype == torch.float32 and float((got - want).abs().max()) < 0.1
