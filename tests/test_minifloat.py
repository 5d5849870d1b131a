"""Issue 24, fp8 and fp4 quantization: quant_type wfp8afp8 / wfp8e4m3afp8e4m3 /
wfp8e5m2afp8e5m2 put the linear layers (Convolution, DepthwiseConv, FullyConnected,
MatMul), graph inputs, constants and the layers that only move values in a scaled fp8
format (quant/minifloat.py), w4afp8e4m3 (wfp4afp8e4m3) gives FullyConnected layers 4-bit
integer (float4_e2m1fn) weights with fp8 activations, and *_act_fp8e4m3fn_wht /
*_act_fp4e2m1fn_wht keep a layer in float with fp8/fp4 weights (weight-only). npuopt's
forward of the IR read back, npuopt-run and the in-memory graph agree on every element;
OPT's forward reads them as npuopt does: tests/test_conformance.py's `fp8_e4m3`,
`fp8_e5m2`, `weight_only_fp8_fc`, `weight_only_fp4_fc` and `wfp4afp8` settings."""
import numpy as np
import pytest
import torch

import npuopt_run.minifloat as run_minifloat
from conftest import npuopt_run_outputs, transformer_encoder_cosine
from npuopt.dtype import Dtype, bytes_to_tensor, fit_float, tensor_to_bytes
from npuopt.ir import read_graph, write_graph
from npuopt.quant import minifloat
from npuopt.quant.quantizer import build_quantized_graph, count_boundaries, float_layers
from npuopt.quant.settings import QuantSettings
from test_ops_conv import params_of
from test_quantize_ops import batches, one_layer, quantize

FORMATS = ("float8_e4m3fn", "float8_e5m2")
# (mantissa bits, smallest normal exponent) of each format, from its definition
DEFINITION = {"float8_e4m3fn": (3, -6), "float8_e5m2": (2, -14), "float4_e2m1fn": (1, 0)}


def nearest_by_definition(x: np.ndarray, name: str) -> np.ndarray:
    """The nearest value of the format (half to even), saturated: its grid spacing at x's
    binade, 2^(exponent - mantissa bits), the subnormals' below the smallest normal."""
    mantissa, smallest = DEFINITION[name]
    largest = minifloat.FORMATS[name].largest
    v = np.clip(x.astype(np.float64), -largest, largest)
    exponent = np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** smallest)))
    step = 2.0 ** (exponent - mantissa)
    return np.clip(np.round(v / step) * step, -largest, largest)


@pytest.mark.parametrize("name", FORMATS + ("float4_e2m1fn",))
def test_rounding_is_to_the_nearest_value_of_the_format(name):
    codes = 16 if name.startswith("float4") else 256
    values = bytes_to_tensor(np.arange(codes, dtype=np.uint8), Dtype(name), (codes,)).numpy()
    values = np.unique(values[np.isfinite(values)])
    midpoints = (values[1:] + values[:-1]) / 2
    rng = np.random.default_rng(0)
    x = np.concatenate([values, midpoints, rng.standard_normal(20000) * values.max() / 3,
                        rng.standard_normal(2000) * 2.0 ** -8, [values.max() * 1.5, -1e9]]).astype(np.float32)
    want = nearest_by_definition(x, name)
    assert np.array_equal(minifloat.round_to(torch.from_numpy(x), name).numpy(), want)
    assert np.array_equal(run_minifloat.round_to(x, name), want)            # npuopt-run's own, in NumPy
    assert minifloat.round_to(torch.tensor([float("nan")]), name).item() == 0.0


@pytest.mark.parametrize("name", FORMATS + ("float4_e2m1fn",))
def test_the_bytes_read_as_the_format_defines_them_and_write_back(name):
    codes = 16 if name.startswith("float4") else 256
    raw = np.arange(codes, dtype=np.uint8)
    ours = bytes_to_tensor(raw, Dtype(name), (codes,)).numpy()
    theirs = run_minifloat.decode(raw, name)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.array_equal(ours[~np.isnan(ours)], theirs[~np.isnan(theirs)])
    assert np.nanmax(ours[np.isfinite(ours)]) == minifloat.FORMATS[name].largest
    finite = np.isfinite(ours)
    assert tensor_to_bytes(torch.from_numpy(ours[finite]), Dtype(name)) == raw[finite].tobytes()


def layers():
    """(name, graph, input shapes) of every layer type the fp8 formats apply to."""
    torch.manual_seed(0)
    conv = params_of((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 6, "RELU")
    dw = params_of((3, 3), (2, 2), (1, 0, 1, 0), (1, 1), 4, 8, "NONE")
    return [
        ("Convolution", one_layer("Convolution", [(5, 5, 7)], conv,
                                  {"weights": torch.randn(6, 3, 3, 7), "biases": torch.randn(6)}), [(5, 5, 7)]),
        ("DepthwiseConv", one_layer("DepthwiseConv", [(5, 5, 4)], dw,
                                    {"weights": torch.randn(8, 3, 3, 1), "biases": torch.randn(8)}), [(5, 5, 4)]),
        ("FullyConnected", one_layer("FullyConnected", [(20,)], dict(num_output=5, with_activation="NONE"),
                                     {"weights": torch.randn(5, 20), "biases": torch.randn(5)}), [(20,)]),
        ("MatMul", one_layer("MatMul", [(3, 4, 6), (3, 6, 5)], dict(trans_a=False, trans_b=False), n_inputs=2),
         [(3, 4, 6), (3, 6, 5)]),
    ]


def step_of(v: torch.Tensor, name: str) -> torch.Tensor:
    """One step of the format's grid at each value."""
    mantissa, smallest = DEFINITION[name]
    return torch.exp2(torch.floor(torch.log2(v.abs().clamp(min=2.0 ** smallest))) - mantissa)


def real(t) -> torch.Tensor:
    return t.betensor.double() / t.broadcast_scale.double() if isinstance(t.scale, torch.Tensor) else \
        t.betensor.double() / float(t.scale)


@pytest.mark.parametrize("method", ["per_channel_symmetric_restricted_range", "per_tensor_symmetric_full_range"])
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("index", range(4), ids=[n for n, *_ in layers()])
def test_fp8_layers_compute_as_the_tool_chain_and_read_back_alike(tmp_path, index, name, method):
    """The output is the float layer's on the fp8 input and weights, rounded once to the
    format at the output's scale (within one step of the format: the rounding of sums);
    the IR read back and npuopt-run give the same values on every element."""
    kind, graph, shapes = layers()[index]
    data = batches(*shapes)
    qg = quantize(graph, data, activation_type=name, weight_type=name, quantize_method_for_weight=method)
    node, out = qg.node("op"), qg.output_tensors[0]
    assert node.quantized and out.dtype is Dtype(name) and out.zerop == 0
    assert all(t.dtype is Dtype(name) for t in node.inputs)
    x = list(data[-1])
    got = qg.forward(x, keep_tensors=True)[0].clone()
    # the float layer on what the fp8 tensors hold (inputs and weights dequantized)
    fl = graph.node("op")
    kept = {k: c.betensor for k, c in fl.constants.items()}
    if "weights" in fl.constants:
        fl.constants["weights"].betensor = real(node.constants["weights"]).float()
    want = graph.forward([real(t).float() for t in node.inputs])[0].double() * float(out.scale)
    for k, v in kept.items():
        fl.constants[k].betensor = v
    assert bool(((got.double() - want).abs() <= step_of(want, name) + 1e-3).all())
    assert float(torch.nn.functional.cosine_similarity(real(out).flatten(), graph.forward(x)[0].double().flatten(),
                                                       dim=0)) > 0.99
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert f"layer_top_type=[{name}]" in path.read_text()
    back = read_graph(str(path))
    assert back.node("op").quantized and torch.equal(back.forward(x)[0], got)
    if len(x) == 1:  # npuopt-run takes one input in this helper
        ran = npuopt_run_outputs(path, x[0].numpy(), tmp_path)[out.name]
        assert np.array_equal(ran, got.numpy())


def test_an_fp8_matmul_with_a_constant_operand(tmp_path):
    """A MatMul reading a Constant, both fp8: the constant's values are stored in the format
    (rounded once at its own scale); the IR read back and npuopt-run compute the same."""
    from npuopt.ir.builder import GraphBuilder
    torch.manual_seed(2)
    b = GraphBuilder("t")
    x = b.input("x", [1, 4, 6])
    w = b.layer("Constant", "w", [], {}, {"weights": torch.randn(6, 5)})
    y = b.layer("MatMul", "op", [x] + w, dict(trans_a=False, trans_b=False))
    graph = b.build(y)
    data = batches((4, 6))
    qg = quantize(graph, data, activation_type="float8_e4m3fn", weight_type="float8_e4m3fn")
    c = qg.node("w")
    assert c.quantized and c.outputs[0].dtype is Dtype.FP8_E4M3FN
    stored = c.constants["weights"]
    assert torch.equal(stored.betensor, minifloat.round_to(graph.node("w").constants["weights"].betensor *
                                                           c.outputs[0].scale, "float8_e4m3fn"))
    x0 = data[-1][0]
    got = qg.forward([x0])[0].clone()
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert "weights_type=float8_e4m3fn" in path.read_text()
    assert torch.equal(read_graph(str(path)).forward([x0])[0], got)
    assert np.array_equal(npuopt_run_outputs(path, x0.numpy(), tmp_path)[qg.output_tensors[0].name], got.numpy())


@pytest.mark.parametrize("weight_type, dtype", [("int", Dtype.INT4), ("float4_e2m1fn", Dtype.FP4_E2M1FN)])
def test_4_bit_weights_with_fp8_activations(tmp_path, weight_type, dtype):
    """w4afp8e4m3 / wfp4afp8e4m3: a FullyConnected layer's weights are 4-bit integers (zero
    points folded into the sums) or float4_e2m1fn values, its activations fp8."""
    kind, graph, shapes = layers()[2]
    data = batches(*shapes)
    qg = quantize(graph, data, activation_type="float8_e4m3fn", weight_bits=4, weight_type=weight_type,
                  quantize_method_for_weight="per_channel_asymmetric")
    w = qg.node("op").constants["weights"]
    assert w.dtype is dtype and qg.output_tensors[0].dtype is Dtype.FP8_E4M3FN
    x = data[-1][0]
    got = qg.forward([x])[0]
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert torch.equal(read_graph(str(path)).forward([x])[0], got)
    assert np.array_equal(npuopt_run_outputs(path, x.numpy(), tmp_path)[qg.output_tensors[0].name], got.numpy())


@pytest.mark.parametrize("mode, dtype", [("float16_act_fp8e4m3fn_wht", Dtype.FP8_E4M3FN),
                                         ("float16_act_fp4e2m1fn_wht", Dtype.FP4_E2M1FN)])
@pytest.mark.parametrize("method, block", [("per_channel_symmetric_restricted_range", 256),
                                           ("per_block_symmetric_restricted_range", 8)])
def test_minifloat_weight_only_layers_compute_with_their_dequantized_weights(tmp_path, method, block, mode, dtype):
    """float16_act_fp8e4m3fn_wht / float16_act_fp4e2m1fn_wht: the layer stays float
    (float16), its weights stored in float8_e4m3fn / float4_e2m1fn with weights_scale per
    channel or per block, dequantized by its forward."""
    kind, graph, shapes = layers()[2]
    data = batches(*shapes)
    qg = quantize(graph, data, trigger_float_op=mode, quantize_method_for_weight=method, weight_block_size=block)
    node = qg.node("op")
    c = node.constants["weights"]
    assert not node.quantized and c.dtype is dtype and c.scale.numel() == 5 * (-(-20 // block))
    x = data[-1][0]
    got = qg.forward([x])[0].clone()
    fl = graph.node("op").constants["weights"]
    kept, fl.betensor = fl.betensor, c.betensor / c.broadcast_scale
    want = fit_float(graph.forward([fit_float(x, Dtype.FP16)])[0], Dtype.FP16)
    fl.betensor = kept
    assert torch.equal(got, want)
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert f"weights_type={dtype.value}" in path.read_text()
    assert torch.equal(read_graph(str(path)).forward([x])[0], got)
    ran = npuopt_run_outputs(path, x.numpy(), tmp_path)[qg.output_tensors[0].name]
    np.testing.assert_allclose(ran, got.numpy(), rtol=2 ** -10, atol=1e-5 * float(got.abs().max()))


def test_fp8_and_integer_layers_meet_through_float16(tmp_path):
    """Between an fp8 layer and an integer one, a DeQuantize to float16 and a Quantize into
    the reader's format, as the tool chain converts; npuopt-run agrees on every element."""
    from npuopt.ir.builder import GraphBuilder
    torch.manual_seed(1)
    b = GraphBuilder("t")
    x = b.input("x", [1, 12])
    h = b.layer("FullyConnected", "fc1", [x], dict(num_output=10, with_activation="NONE"),
                {"weights": torch.randn(10, 12), "biases": torch.randn(10)})
    s = b.layer("Activation", "sig", h, dict(method="SIGMOID"))
    y = b.layer("FullyConnected", "fc2", s, dict(num_output=4, with_activation="NONE"),
                {"weights": torch.randn(4, 10), "biases": torch.randn(4)})
    graph = b.build(y)
    data = batches((12,))
    quantize(graph, data)  # calibrated (statistics attached)
    fp8_settings = QuantSettings(activation_type="float8_e4m3fn", weight_type="float8_e4m3fn",
                                 calibration_strategy_for_activation="extrema")
    settings = {n.name: fp8_settings for n in graph.nodes}
    settings["sig"] = QuantSettings(calibration_strategy_for_activation="extrema")
    qg, kept = build_quantized_graph(graph, settings, float_layers(graph, settings))
    assert not kept
    types = [(n.type, n.outputs[0].dtype.value) for n in qg.nodes]
    assert types == [("Input", "float8_e4m3fn"), ("FullyConnected", "float8_e4m3fn"), ("DeQuantize", "float16"),
                     ("Quantize", "int8"), ("Activation", "uint8"), ("DeQuantize", "float16"),
                     ("Quantize", "float8_e4m3fn"), ("FullyConnected", "float8_e4m3fn")]
    x = data[-1][0]
    got = qg.forward([x])[0].clone()
    out = qg.output_tensors[0]
    cos = torch.nn.functional.cosine_similarity(real(out).flatten(), graph.forward([x])[0].double().flatten(), dim=0)
    assert float(cos) > 0.99
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert torch.equal(read_graph(str(path)).forward([x])[0], got)
    assert np.array_equal(npuopt_run_outputs(path, x.numpy(), tmp_path)[out.name], got.numpy())


def test_an_integer_tensor_read_by_fp8_and_float16_layers_has_one_dequantize(tmp_path):
    """An integer tensor read by an fp8 layer (DeQuantize to float16, Quantize to fp8) and by
    a layer kept in float16 goes through one DeQuantize to float16 (the reader's format
    matters to a Quantize only): the transformer_encoder with quant_type = wfp8afp8 and its
    LayerNorms in float stopped with 'tensor ... written twice' when each got its own."""
    from npuopt.ir.builder import GraphBuilder
    torch.manual_seed(2)
    b = GraphBuilder("t")
    x = b.input("x", [1, 12])
    s = b.layer("Activation", "sig", [x], dict(method="SIGMOID"))
    h = b.layer("FullyConnected", "fc", s, dict(num_output=12, with_activation="NONE"),
                {"weights": torch.randn(12, 12), "biases": torch.randn(12)})
    t = b.layer("Activation", "tanh", s, dict(method="TANH"))
    y = b.layer("Eltwise", "add", h + t, dict(method="ADD", with_activation="NONE"))
    graph = b.build(y)
    data = batches((12,))
    quantize(graph, data)  # calibrated (statistics attached)
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema") for n in graph.nodes}
    settings["fc"] = QuantSettings(activation_type="float8_e4m3fn", weight_type="float8_e4m3fn",
                                   calibration_strategy_for_activation="extrema")
    settings["tanh"] = QuantSettings(trigger_float_op="float16_preferred")
    qg, kept = build_quantized_graph(graph, settings, float_layers(graph, settings))
    assert kept == {"tanh"}
    inserted = sum(n.type in ("Quantize", "DeQuantize") for n in qg.nodes)
    assert count_boundaries(graph, {"tanh"}, settings) == inserted  # what a precision search counts
    dequantized = [n for n in qg.nodes if n.type == "DeQuantize" and n.inputs[0].name == s[0]]
    assert [n.outputs[0].dtype.value for n in dequantized] == ["float16"]
    readers = {n.name for n in qg.nodes if dequantized[0].outputs[0] in n.inputs}
    assert len(readers) == 2 and "tanh" in readers  # tanh, and the Quantize into fc's fp8
    x = data[-1][0]
    got = qg.forward([x])[0].clone()
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    assert torch.equal(read_graph(str(path)).forward([x])[0], got)
    assert np.array_equal(npuopt_run_outputs(path, x.numpy(), tmp_path)[qg.output_tensors[0].name], got.numpy())


def test_quant_type_puts_fp8_on_the_tool_chains_layer_types(tmp_path):
    """wfp8afp8: Convolution layers with a fused NONE or RELU and the graph input in
    float8_e4m3fn; pooling, and convolutions fusing RELU6 (whose fused forward the tool
    chain cannot run on an fp8 layer), 8-bit integers."""
    from npuopt.config import quant_type_settings
    assert quant_type_settings("wfp8afp8", "Convolution", "RELU")["activation_type"] == "float8_e4m3fn"
    assert quant_type_settings("wfp8afp8", "Input")["weight_type"] == "float8_e4m3fn"
    assert quant_type_settings("wfp8e5m2afp8e5m2", "Reshape")["activation_type"] == "float8_e5m2"
    for layer_type, fused in (("Pooling", "NONE"), ("Convolution", "RELU6"), ("Eltwise", "NONE")):
        values = quant_type_settings("wfp8afp8", layer_type, fused)
        assert "activation_type" not in values and values["activation_bits"] == 8
    assert quant_type_settings("w4afp8e4m3", "FullyConnected")["weight_bits"] == 4
    assert "activation_type" not in quant_type_settings("w4afp8e4m3", "Convolution")


def test_a_number_type_outside_the_list_stops_with_one_line(tmp_path):
    from npuopt.errors import ConfigError
    with pytest.raises(ConfigError, match=r"activation_type 'float8_e3m4' is not one of int, float8_e4m3fn, "):
        QuantSettings(activation_type="float8_e3m4")
    with pytest.raises(ConfigError, match=r"activation_type 'float4_e2m1fn' is not one of int, float8_e4m3fn, "
                                          r"float8_e5m2$"):
        QuantSettings(activation_type="float4_e2m1fn")
    from npuopt.quant.settings import read_opt_config
    graph = one_layer("FullyConnected", [(4,)], dict(num_output=2, with_activation="NONE"),
                      {"weights": torch.randn(2, 4), "biases": torch.zeros(2)})
    path = tmp_path / "opt_config.json"
    path.write_text('{"op": {"weight_type": "fp8"}}')
    with pytest.raises(ConfigError, match=r"^opt_config '.*opt_config.json': layer 'op': weight_type 'fp8' is not "
                                          r"one of int, float8_e4m3fn, float8_e5m2, float4_e2m1fn$"):
        read_opt_config(str(path), graph)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float4_e2m1fn"])
def test_gptq_rounds_onto_a_minifloat_grid_with_less_error_than_nearest(name):
    """GPTQ's column-by-column rounding with a minifloat grid's rounding (WeightGrid.to_grid):
    its values are the format's, and the output error is below nearest rounding's (about
    half, on correlated inputs)."""
    from npuopt.quant.global_calibration._layers import Problem as RealProblem, Rows
    from npuopt.quant.global_calibration.gptq import round_columns
    from npuopt.quant.tensors import WeightGrid
    torch.manual_seed(0)
    rows, k = 16, 64
    x = torch.randn(512, k) @ (torch.eye(k) + 0.3 * torch.randn(k, k))
    h = (x.T @ x / 512).unsqueeze(0)
    w = torch.randn(1, rows, k) * 0.05
    largest = minifloat.FORMATS[name].largest
    scale = minifloat.scale_of(float(w.abs().max()), name)
    grid = WeightGrid(scale, 0, -largest, largest, 8, 0, w.shape, None, name)

    class Problem:
        weights, H, low_rank, C, damp = w, h, None, w @ h, torch.full((1, 1, 1), 1e-3)

        @staticmethod
        def input_power():
            return h.diagonal(dim1=1, dim2=2)

        @staticmethod
        def cross(r0, r1):
            return (w @ h)[:, r0:r1]

        @classmethod
        def parts(cls):
            yield Rows(cls, 0, rows)

        integers_by_parts = classmethod(RealProblem.integers_by_parts)

    Problem.grid_values, Problem.to_grid = staticmethod(lambda r0, r1: (scale, 0)), staticmethod(grid.to_grid)
    q = round_columns(Problem, act_order=True, block=16)

    def error(v):
        d = v / scale - w
        return float((d @ h * d).sum())
    assert torch.equal(minifloat.round_to(q, name), q)
    assert error(q) < 0.6 * error(grid.to_grid(w * scale))


# the figures since calibration takes each batch of 16 as one (this IR runs a batch one sample at
# a time; before, each sample entered the running means alone): e4m3 0.999065 -> 0.999056, fp4
# weights with fp8 activations 0.99791 -> 0.99785, w16a16 0.99981 -> 0.99994, 8-bit 0.99929 -> 0.99928
@pytest.mark.shared
@pytest.mark.parametrize("fields, floor", [
    (dict(quant_type="wfp8afp8"), 0.999),    # issue 24's floor: 0.999056 with the default GPTQ (nearest: 0.999004;
    # 0.99899 before the attention's scalings were merged into its MatMul; 8-bit: 0.99928)
    (dict(quant_type="wfp8e5m2afp8e5m2"), 0.998),               # 0.99838 with the default GPTQ (nearest: 0.99806)
    (dict(quant_type="wfp4", quantize_method_for_weight="per_block_symmetric_restricted_range",
          weight_block_size=32), 0.998),                        # 0.99881 with the default GPTQ (nearest: 0.99735)
    (dict(quant_type="wfp4afp8e4m3", quantize_method_for_weight="per_channel_symmetric_restricted_range"),
     0.997),                                                    # 0.99785
    (dict(quant_type="w16a16"), 0.999),     # 0.99994 (LayerNorm inputs widened; 0.99679 not, at GPTQ damping 0.01)
], ids=["e4m3", "e5m2", "fp4_weight_only", "fp4_weights_fp8_activations", "w16a16"])
def test_transformer_encoder_formats(tmp_path, fields, floor):
    """The parser's transformer_encoder under the fp8/fp4 quant_types and w16a16: output
    cosine to float over 16 samples it was not calibrated on (docs/formats.md; bench/bench_formats.py prints the figures)."""
    cosine, _ = transformer_encoder_cosine(tmp_path, **fields)
    assert cosine >= floor, cosine
