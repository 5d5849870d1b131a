"""Quantize functions and integer forwards, op by op: integer outputs in range,
dequantized outputs close to float, bit-exact save/reload, and the forward
using only the numbers stored in the IR."""
import re

import pytest
import torch

import npuopt.ops  # noqa: F401
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.settings import QuantSettings
from npuopt.quant.calibration import Calibrator, attach_statistics
from npuopt.quant.compare import dequantized
from npuopt.quant.quantizer import build_quantized_graph, float_layers

INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def quantize(graph, data, **settings):
    """Calibrate `graph` on `data` (list of input batches) and quantize it."""
    graph.mark_integer_tensors()
    calib = Calibrator(graph, 512, 0.9)
    attach_statistics(graph, calib.run([list(d) for d in data]))
    settings.setdefault("calibration_strategy_for_activation", "extrema")
    s = {n.name: QuantSettings(**settings) for n in graph.nodes}
    qg, _ = build_quantized_graph(graph, s, float_layers(graph, s))
    return qg


def one_layer(optype, shapes, params=None, constants=None, n_inputs=1):
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", [1] + list(shapes[i])) for i in range(n_inputs)]
    tops = b.layer(optype, "op", names, params, constants)
    return b.build(tops)


def check(graph, data, tmp_path, tol_lsb=2.5, min_cos=0.995, tol_abs=0.0, **settings):
    """Quantize and run every check; returns (quantized graph, integer output)."""
    qg = quantize(graph, data, **settings)
    test_in = list(data[-1])
    want = graph.forward(test_in)[0]
    got = qg.forward(test_in)[0].clone()
    out_t = qg.output_tensors[0]
    assert got.dtype in INT_DTYPES and got.dtype == out_t.dtype.torch_dtype
    assert int(got.min()) >= out_t.dtype.qmin and int(got.max()) <= out_t.dtype.qmax
    deq = dequantized(out_t, got)
    err = (deq - want).abs().max().item()
    assert err <= max(tol_lsb / float(out_t.scale), tol_abs) + 1e-6, (err, 1 / float(out_t.scale))
    cos = torch.nn.functional.cosine_similarity(deq.flatten(), want.flatten(), dim=0).item()
    assert cos >= min_cos
    # save + reload: bit-exact
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    back = read_graph(str(path))
    again = back.forward(test_in)[0]
    assert torch.equal(again, got)
    return qg, got, back, path


def perturbed_output(path, test_in, pattern, repl):
    text = path.read_text()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    path.write_text(new)
    return read_graph(str(path)).forward(test_in)[0]


def batches(*shapes, n=4, batch=4, lo=-2.0, hi=2.0):
    return [tuple(torch.rand(batch, *s) * (hi - lo) + lo for s in shapes) for _ in range(n)]


CONV = dict(kernel_y=3, kernel_x=3, stride_y=1, stride_x=1, pad_top=1, pad_bottom=1, pad_left=0, pad_right=2,
            dilation_x=1, dilation_y=1, group=1, num_output=8)

METHODS = [
    dict(quantize_method_for_weight="per_channel_symmetric_restricted_range",
         quantize_method_for_activation="per_tensor_asymmetric"),
    dict(quantize_method_for_weight="per_tensor_symmetric_restricted_range",
         quantize_method_for_activation="per_tensor_symmetric_full_range"),
    dict(quantize_method_for_weight="per_channel_asymmetric",
         quantize_method_for_activation="per_tensor_asymmetric", activation_bits=16),
]


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("act", ["NONE", "RELU", "RELU6", "LEAKYRELU", "CLIP"])
def test_convolution(tmp_path, mode, act):
    params = dict(CONV, with_activation=act, negative_slope_value=0.1, clip_min=-0.5, clip_max=1.0)
    w = torch.randn(8, 3, 3, 4) * 0.3
    g = one_layer("Convolution", [(6, 6, 4)], params, {"weights": w, "biases": torch.randn(8) * 0.2})
    # 16-bit outputs: the error is the 8-bit weights', not the output's LSB
    qg, got, back, path = check(g, batches((6, 6, 4)), tmp_path, tol_abs=0.08, **METHODS[mode])
    node = qg.node("op")
    assert node.constants["weights"].betensor.dtype in (torch.int8, torch.uint8)
    assert node.constants["biases"].betensor.dtype == torch.int32
    per_channel = METHODS[mode]["quantize_method_for_weight"].startswith("per_channel")
    assert ("scale" in node.constants) == per_channel
    test_in = list(batches((6, 6, 4), n=1)[0])
    base = back.forward(test_in)[0].clone()
    if per_channel:
        # the per-channel multiplier is a constant: change it in the .bin
        c = back.node("op").constants["scale"]
        offset = int(re.search(r"^scale_offset=(\d+)", path.read_text(), re.M).group(1))
        raw = bytearray(path.with_suffix(".bin").read_bytes())
        raw[offset] ^= 0x40
        path.with_suffix(".bin").write_bytes(bytes(raw))
        assert c is not None
        changed = read_graph(str(path)).forward(test_in)[0]
    else:
        m = int(re.search(r"^scale_value=(\d+)", path.read_text(), re.M).group(1))
        changed = perturbed_output(path, test_in, r"^scale_value=\d+", f"scale_value={m // 2}")
    assert not torch.equal(changed, base)


def test_depthwise_and_weight_bits_4(tmp_path):
    params = dict(CONV, group=4, num_output=4, with_activation="RELU6")
    g = one_layer("Convolution", [(6, 6, 4)], params, {"weights": torch.randn(4, 3, 3, 1), "biases": torch.randn(4)})
    qg, *_ = check(g, batches((6, 6, 4)), tmp_path, tol_abs=1.5, min_cos=0.95, weight_bits=4,
                   quantize_method_for_weight="per_channel_symmetric_restricted_range",
                   quantize_method_for_activation="per_tensor_asymmetric")
    w = qg.node("op").constants["weights"]
    assert w.dtype.value == "aligned_int4" and int(w.betensor.abs().max()) <= 7


@pytest.mark.parametrize("method", ["MAX", "AVG"])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_pooling(tmp_path, method, count_include_pad):
    params = dict(method=method, kernel_y=3, kernel_x=3, stride_y=2, stride_x=2, pad_top=1, pad_bottom=1,
                  pad_left=1, pad_right=1, ceil_mode=True, count_include_pad=count_include_pad)
    g = one_layer("Pooling", [(7, 7, 3)], params)
    qg, got, back, path = check(g, batches((7, 7, 3)), tmp_path, quantize_method_for_activation="per_tensor_asymmetric")
    if method == "AVG":
        # the multiplier is derived from the layer's own layer_top_scale: editing it changes the output
        test_in = list(batches((7, 7, 3), n=1)[0])
        base = back.forward(test_in)[0].clone()
        changed = perturbed_output(path, test_in, r"(layer_name=op\n(?:.*\n)*?layer_top_scale=\[)[^\]]*",
                                   r"\g<1>3.0")
        assert not torch.equal(changed, base)


@pytest.mark.parametrize("method", ["ADD", "SUB", "MUL", "MAX", "MIN"])
@pytest.mark.parametrize("act", ["NONE", "RELU", "LEAKYRELU"])
def test_eltwise(tmp_path, method, act):
    g = one_layer("Eltwise", [(4, 4, 3), (1, 1, 3)], dict(method=method, with_activation=act,
                                                          negative_slope_value=0.2), n_inputs=2)
    data = [(torch.randn(4, 4, 4, 3), torch.rand(4, 1, 1, 3) * 4 - 1) for _ in range(4)]
    qg, got, back, path = check(g, data, tmp_path, quantize_method_for_activation="per_tensor_asymmetric")
    test_in = list(data[0])
    base = back.forward(test_in)[0].clone()
    if method == "MUL":
        changed = perturbed_output(path, test_in, r"^scale_value=(\d+)", "scale_value=12345")
    else:
        # scale_value=[M_out, M_a, M_b]: halve the first input's multiplier
        m_a = int(re.search(r"^scale_value=\[\d+,(\d+),", path.read_text(), re.M).group(1))
        changed = perturbed_output(path, test_in, r"^scale_value=\[(\d+),\d+,", rf"scale_value=[\g<1>,{m_a // 2},")
    assert not torch.equal(changed, base)


def test_concat_requantizes_and_copies(tmp_path):
    b = GraphBuilder("t")
    a = b.input("a", [1, 4, 4, 2])
    c = b.input("c", [1, 4, 4, 3])
    b.layer("Concat", "cat", [a, c], dict(axis=3))
    g = b.build(["cat"])
    data = [(torch.randn(2, 4, 4, 2), torch.randn(2, 4, 4, 3) * 5) for _ in range(3)]
    qg, got, back, path = check(g, data, tmp_path)
    test_in = list(data[0])
    base = back.forward(test_in)[0].clone()
    changed = perturbed_output(path, test_in, r"^scale_value=\[(\d+),", "scale_value=[3,")
    assert not torch.equal(changed, base)
    # one shared quantization: the output takes it and the layer is a copy
    b = GraphBuilder("t")
    a = b.input("a", [1, 4, 4, 2])
    b.layer("Concat", "cat", [a, a], dict(axis=3))
    g = b.build(["cat"])
    qg = quantize(g, [(torch.randn(2, 4, 4, 2),)])
    x = torch.randn(2, 4, 4, 2)
    out = qg.forward([x], keep_tensors=True)[0]
    assert torch.equal(out, torch.cat([qg.node("a").outputs[0].betensor] * 2, dim=3))
    assert "scale_value" not in qg.node("cat").params


def test_reshape_transpose_pass_through(tmp_path):
    b = GraphBuilder("t")
    x = b.input("x", [1, 2, 3, 4])
    b.layer("Transpose", "tr", [x], dict(perm=[0, 3, 1, 2]))
    b.layer("Reshape", "rs", ["tr"], dict(shape=[1, 24]))
    g = b.build(["rs"])
    qg, got, *_ = check(g, batches((2, 3, 4)), tmp_path)
    got = qg.forward(list(batches((2, 3, 4), n=1)[0]), keep_tensors=True)[0]
    assert qg.node("rs").outputs[0].scale == qg.node("x").outputs[0].scale
    q_in = qg.node("x").outputs[0].betensor
    assert torch.equal(got, q_in.permute(0, 3, 1, 2).reshape(got.shape))


@pytest.mark.parametrize("bits", [8, 16])
def test_softmax(tmp_path, bits):
    g = one_layer("Softmax", [(10,)], dict(axis=-1))
    data = [(torch.randn(8, 10) * 3,) for _ in range(3)]
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=5 if bits == 8 else 400, activation_bits=bits)
    out_t = qg.output_tensors[0]
    # probabilities: unsigned, at least qmax steps per unit
    assert out_t.dtype.value == ("uint8" if bits == 8 else "uint16") and float(out_t.scale) >= 2 ** bits - 1
    test_in = list(data[0])
    base = back.forward(test_in)[0].clone()
    text = path.read_text()
    form = re.search(r"^quantize_method=(\w+)", text, re.M).group(1)
    # 8-bit inputs index a full table; 16-bit ones would interpolate it coarsely: FAST_EXP
    assert form == ("LUT" if bits == 8 else "FAST_EXP")
    if form == "LUT":
        offset = int(re.search(r"^lut_offset=(\d+)", text, re.M).group(1))
        raw = bytearray(path.with_suffix(".bin").read_bytes())
        raw[offset + 4 * 255 + 1] ^= 0x7f    # the last uint32 entry: every row's maximum
        path.with_suffix(".bin").write_bytes(bytes(raw))
    else:
        scale = int(re.search(r"^input_scale_value=(\d+)", text, re.M).group(1))
        path.write_text(text.replace(f"input_scale_value={scale}", f"input_scale_value={scale // 2}"))
    assert not torch.equal(read_graph(str(path)).forward(test_in)[0], base)


@pytest.mark.parametrize("method", ["RELU", "RELU6", "CLIP", "LEAKYRELU", "SIGMOID", "TANH", "SWISH",
                                    "HARDSWISH", "HARDSIGMOID", "GELU"])
@pytest.mark.parametrize("bits", [8, 16])
def test_activation(tmp_path, method, bits):
    g = one_layer("Activation", [(5, 5, 3)], dict(method=method, clip_min=-1.0, clip_max=2.0,
                                                  negative_slope_value=0.1))
    data = batches((5, 5, 3), lo=-6, hi=7)
    # 16-bit inputs go through 256-entry tables with interpolation: coarser than 1 LSB
    tol = 2.5 if bits == 8 or method in ("RELU", "RELU6", "CLIP", "LEAKYRELU") else 300
    in_lsb = 13.0 / (2 ** bits - 1)          # the input's rounding error, through slopes up to ~1.1
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=tol, tol_abs=in_lsb * 0.6 + 1.5 / 2 ** bits,
                                min_cos=0.99, activation_bits=bits,
                                quantize_method_for_activation="per_tensor_asymmetric")
    node = qg.node("op")
    assert ("lut" in node.constants) == (method not in ("RELU", "RELU6", "CLIP", "LEAKYRELU"))


def test_quantized_outputs_are_integer_everywhere(tmp_path):
    from npuopt.ir import read_graph as rg
    g = rg("examples/tiny_cnn/tiny_cnn.txt")
    import numpy as np
    data = torch.from_numpy(np.load("examples/tiny_cnn/data.npy")).float()
    qg = quantize(g, [(data[:16],), (data[16:32],)], quantize_method_for_activation="per_tensor_asymmetric")
    qg.forward([data[:4]], keep_tensors=True)
    for node in qg.nodes:
        assert node.quantized
        for t in node.outputs:
            assert t.betensor.dtype in INT_DTYPES, node.name


@pytest.mark.parametrize("optype, shape, weights", [
    ("Convolution", (6, 6, 4), torch.randn(8, 3, 3, 4)),
    ("FullyConnected", (16,), torch.randn(8, 16)),
])
def test_new_integer_weights_are_used_even_where_a_freed_tensor_had_their_id(optype, shape, weights):
    """The integer weights a layer derives and caches follow a new weights tensor, also
    one that takes the id() of the freed old one (as when a global calibration method
    quantizes a layer again)."""
    params = dict(CONV) if optype == "Convolution" else dict(num_output=8)
    g = one_layer(optype, [shape], params, {"weights": weights * 0.3, "biases": torch.randn(8) * 0.2})
    qg = quantize(g, batches(shape))
    node, x = qg.node("op"), list(batches(shape, n=1)[0])
    before = qg.forward(x)[0].clone()
    c = node.constants["weights"]
    flipped = (-c.betensor.to(torch.int32)).to(c.betensor.dtype).clone()
    ids = {id(c.betensor)}
    c.betensor = None  # free the old tensor: CPython hands its slot to the next one
    c.betensor = flipped.clone()
    del flipped
    ids.add(id(c.betensor))
    after = qg.forward(x)[0].clone()
    for key in [k for k in node.attrs if k.startswith("_")]:  # what the layer derives from its weights
        del node.attrs[key]
    assert torch.equal(after, qg.forward(x)[0]), f"the old integer weights ran (ids {ids})"
    assert not torch.equal(after, before)
