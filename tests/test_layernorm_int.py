"""Integer LayerNorm in the tool chain's form (npuopt/ops/layernorm.py, docs/integer-semantics.md
"LayerNorm"): integer outputs close to float LayerNorm, bit-exact save/reload, the
stored numbers in use, a constant row, and the float-kept variant (trigger_float_op).
Bit-exactness against the tool chain's own forward is tests/test_conformance.py's job."""
import math
import re

import pytest
import torch

from npuopt.ir.builder import GraphBuilder
from npuopt.quant.calibration import Calibrator, attach_statistics
from npuopt.quant.quantizer import build_quantized_graph, float_layers
from npuopt.quant.settings import QuantSettings
from tests.test_quantize_ops import METHODS, batches, check, one_layer, perturbed_output, quantize
from tests.test_quantize_ops_more import assert_multiplier_matters, output_stage, run_keep


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


EIGHT_BIT_METHODS = [m for m in METHODS if m.get("activation_bits", 8) == 8]


def normalized_scale(node, count):
    p = node.params
    return p["norm_scale_value"] * 2.0 ** (7 - p["norm_shift_value"] + p["var_shift_value"] / 2) / math.sqrt(count)


def dequantized_layernorm(node, dims):
    """Float LayerNorm of the dequantized input, gamma and beta (beta stored at s_n * s_w,
    s_n from the stored numbers as the docs give it): what the integer arithmetic
    approximates, without the quantization of its inputs."""
    x_t, w, b = node.inputs[0], node.constants["weights"], node.constants["biases"]
    count = math.prod(x_t.betensor.shape[d] for d in dims)
    s_n = normalized_scale(node, count)
    s_w = torch.as_tensor(w.scale, dtype=torch.float64)
    gamma = (w.betensor.double() + torch.as_tensor(w.zerop, dtype=torch.float64)) / s_w
    beta = (b.betensor.double() + torch.as_tensor(b.zerop, dtype=torch.float64)) / (s_n * s_w)
    x = (x_t.betensor.double() + x_t.zerop) / x_t.scale
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    shape = [x.shape[d] if d in dims else 1 for d in range(x.dim())]
    return (x - mean) / var.sqrt() * gamma.reshape(shape) + beta.reshape(shape)


@pytest.mark.parametrize("mode", range(len(EIGHT_BIT_METHODS)))
@pytest.mark.parametrize("shape,axis", [((5, 32), [2]), ((3, 4, 6), [2, 3]), ((2, 3), [-1]), ((4, 6), [1])])
def test_layernorm_8_bits_is_close_and_reloads(tmp_path, mode, shape, axis):
    """Against float LayerNorm within the input's quantization error (divided by the
    row's spread) and 8-bit gamma; against float LayerNorm of the dequantized input,
    gamma and beta (the arithmetic alone) within what the format rounds: the mean to an
    input step (half a step over the row's std), the normalized value to 8 bits (half a
    step of 1 / s_n), both times gamma, and 1 output LSB."""
    g = ln_graph(shape, axis)
    data = rows_of(shape)
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=6.0, min_cos=0.998, **EIGHT_BIT_METHODS[mode])
    node = qg.node("op")
    out_t = node.outputs[0]
    assert node.quantized and out_t.dtype.is_integer and out_t.dtype.is_signed
    assert node.constants["biases"].betensor.dtype == torch.int32
    per_channel = EIGHT_BIT_METHODS[mode]["quantize_method_for_weight"].startswith("per_channel")
    assert ("scale" in node.constants) == (per_channel and normalized(shape, axis)[-1] > 1)
    got = qg.forward(list(data[-1]), keep_tensors=True)[0].double()
    ref = dequantized_layernorm(node, [a % got.dim() for a in axis])
    ref = ref.clamp((out_t.qmin + out_t.zerop) / out_t.scale, (out_t.qmax + out_t.zerop) / out_t.scale)
    count = math.prod(normalized(shape, axis))
    gamma_max = float(g.node("op").constants["weights"].betensor.abs().max())
    dims = [a % got.dim() for a in axis]
    std_steps = float(node.inputs[0].betensor.double().std(dim=dims, unbiased=False).min())
    bound = 0.5 * gamma_max * (1 / normalized_scale(node, count) + 1 / std_steps) * out_t.scale + 1.0
    assert float(((got + out_t.zerop) / out_t.scale - ref).abs().max()) * out_t.scale <= bound


@pytest.mark.parametrize("shape,axis", [((5, 32), [2]), ((3, 4, 6), [2, 3])])
def test_layernorm_16_bits_within_the_formats_precision(tmp_path, shape, axis):
    """At 16 bits the tool chain's form rounds g = 2^15 / std (std in input steps) to an
    integer first: a relative error up to 0.5 / g of the normalized value, which the
    bound here allows, with 8-bit per-tensor gamma's half step (max|gamma| / 254 per unit
    of the normalized value) and 4 output LSB; nothing else may add to it."""
    g = ln_graph(shape, axis)
    data = rows_of(shape)
    qg, got, back, path = check(g, data, tmp_path, tol_abs=1.0, min_cos=0.99, activation_bits=16)
    node = qg.node("op")
    x_t, out_t = node.inputs[0], node.outputs[0]
    test_in = list(data[-1])
    want = g.forward(test_in)[0].double()
    got = qg.forward(test_in, keep_tensors=True)[0].double()
    dims = [a % want.dim() for a in axis]
    std_steps = x_t.betensor.double().std(dim=dims, keepdim=True, unbiased=False)
    float_node = g.node("op")
    norm_shape = want.shape[-len(dims):]
    gamma = float_node.constants["weights"].betensor.double().reshape(norm_shape)
    x_hat = (want - float_node.constants["biases"].betensor.double().reshape(norm_shape)) / gamma
    bound = x_hat.abs() * (gamma.abs() * 0.5 * std_steps / 2 ** 15 + float(gamma.abs().max()) / 254) \
        + 4 / out_t.scale
    deq = (got + out_t.zerop) / out_t.scale
    assert bool(((deq - want).abs() <= bound).all())


def test_a_constant_row_gives_the_biases():
    """Variance 0: d = 0, n = 0, so z = q_b + zp_b through the output stage."""
    g = ln_graph((3, 8), [2])
    qg = quantize(g, rows_of((3, 8)))
    got = qg.forward([torch.full((1, 3, 8), 0.7)], keep_tensors=True)[0].long()
    node = qg.node("op")
    b = node.constants["biases"]
    z = (b.betensor.long() + torch.as_tensor(b.zerop).long()).expand(3, 8)
    assert torch.equal(got[0], output_stage(node, z, node.outputs[0]))


@pytest.mark.parametrize("bits,keys", [(8, ("var_shift_value", "norm_shift_value")),
                                       (16, ("norm_scale_value", "norm_shift_value"))])
def test_the_stored_numbers_are_used(tmp_path, bits, keys):
    g = ln_graph((4, 64), [2])
    data = rows_of((4, 64))
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=6.0 if bits == 8 else 0.0, tol_abs=0.5,
                                activation_bits=bits)
    test_in = list(data[-1])
    base = back.forward(test_in)[0].clone()
    original = path.read_text()
    for key in keys:
        value = int(re.search(rf"^{key}=(\d+)", original, re.M).group(1))
        changed = perturbed_output(path, test_in, rf"^{key}=\d+", f"{key}={value + 2 + value // 2}")
        assert not torch.equal(changed, base), key
        path.write_text(original)
    assert_multiplier_matters(back, path, test_in)


def test_the_variance_shift_keeps_large_rows_within_range():
    """N = 768 at 8 bits: sum d^2 reaches 768 * 255^2 > 2^25, var_shift brings it down."""
    g = ln_graph((2, 768), [2])
    qg = quantize(g, rows_of((2, 768)))
    node = qg.node("op")
    assert node.params["var_shift_value"] == 2 * math.ceil((math.ceil(math.log2(768)) - 4) / 2)


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
    assert "DeQuantize" in [n.type for n in qg.nodes]
    want = g.forward(list(data[-1]))[0]
    got = qg.forward(list(data[-1]))[0]
    assert got.dtype == torch.float32 and float((got - want).abs().max()) < 0.1


def test_a_16_bit_inputs_range_is_widened_until_g_keeps_its_bits():
    """quant/norm_inputs.py: a 16-bit LayerNorm input spanning thousands of steps keeps 3-4
    bits of the wide path's g = 2^15 / sqrt(V); its planned range is widened until its
    standard deviation spans at most 2^7.5 steps, and the output error falls (here by more
    than 4 times)."""
    from npuopt.quant.norm_inputs import BALANCED_STEPS, widen_norm_inputs
    shape = (6, 64)
    graph = ln_graph(shape, [-1])
    data = [tuple(torch.randn(4, *shape) for _ in range(1)) for _ in range(4)]
    graph.mark_integer_tensors()
    attach_statistics(graph, Calibrator(graph, 512, 0.9).run([list(d) for d in data]))
    settings = {n.name: QuantSettings(activation_bits=16, weight_bits=16, bias_bits=48, lut_items_in_bits=10,
                                      calibration_strategy_for_activation="extrema") for n in graph.nodes}

    class Plan:
        replanned = []
        graph = None

        def replan(self, *layers):
            self.replanned.extend(layers)

    def error():
        qg, _ = build_quantized_graph(graph, settings, float_layers(graph, settings))
        x = list(data[-1])
        out = qg.output_tensors[0]
        got = (qg.forward(x)[0].double() + float(out.zerop)) / float(out.scale)
        return float((got - graph.forward(x)[0].double()).abs().mean()), qg
    for n in graph.nodes:
        n.attrs["qsettings"] = settings[n.name]
    before, _ = error()
    plan = Plan()
    plan.graph = graph
    widen_norm_inputs(plan)
    t = graph.input_tensors[0]
    assert plan.replanned == [graph.nodes[0].name] and t.planned_range is not None
    after, qg = error()
    steps = float(t.statistics.std) * float(qg.input_tensors[0].scale)
    assert steps <= BALANCED_STEPS * 1.01 and after < before / 4, (before, after, steps)
