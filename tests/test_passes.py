"""Stage-1 passes: BatchNorm folding and activation fusion keep the float outputs."""
import torch

from npuopt.ir.builder import GraphBuilder
from npuopt.passes import run_stage1

torch.manual_seed(0)

CONV = dict(kernel_x=3, kernel_y=3, stride_x=1, stride_y=1, pad_left=1, pad_right=1, pad_top=1,
            pad_bottom=1, dilation_x=1, dilation_y=1, group=1, num_output=4, with_activation="NONE")


def conv(b, name, bottom, act="NONE", biases=True):
    constants = {"weights": torch.randn(4, 3, 3, 3)}
    if biases:
        constants["biases"] = torch.randn(4)
    return b.layer("Convolution", name, [bottom], dict(CONV, with_activation=act), constants)[0]


def bn(b, name, bottom, channels=4):
    return b.layer("BatchNorm", name, [bottom], {"axis": -1},
                   {"weights": torch.rand(channels) + 0.5, "biases": torch.randn(channels)})[0]


def act(b, name, bottom, method, **params):
    return b.layer("Activation", name, [bottom], dict(method=method, **params))[0]


def check_stage1(graph, inputs, removed):
    """Runs stage 1; asserts the layers removed and the outputs unchanged (1e-5 relative)."""
    before = [o.clone() for o in graph.forward(inputs)]
    names = [n.name for n in graph.nodes]
    run_stage1(graph)
    assert [n.name for n in graph.nodes] == [n for n in names if n not in removed]
    for got, want in zip(graph.forward(inputs), before):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_conv_bn_relu_becomes_one_conv():
    b = GraphBuilder("t")
    x = b.input("x", [2, 6, 6, 3])
    y = act(b, "relu", bn(b, "bn", conv(b, "conv", x)), "RELU")
    graph = b.build([y])
    check_stage1(graph, [torch.randn(2, 6, 6, 3)], {"bn", "relu"})
    node = graph.node("conv")
    assert node.params["with_activation"] == "RELU"
    assert node.outputs[0].name == "relu" and graph.output_tensors[0] is node.outputs[0]


def test_fc_without_biases_bn_clip():
    b = GraphBuilder("t")
    x = b.input("x", [3, 5, 6])
    fc = b.layer("FullyConnected", "fc", [x], {"num_output": 4}, {"weights": torch.randn(4, 6)})[0]
    y = act(b, "clip", bn(b, "bn", fc), "CLIP", clip_min=-0.3, clip_max=0.7)
    z = b.layer("Softmax", "prob", [y], {"axis": -1})[0]
    graph = b.build([z])
    check_stage1(graph, [torch.randn(3, 5, 6)], {"bn", "clip"})
    node = graph.node("fc")
    assert "biases" in node.constants
    assert (node.params["with_activation"], node.params["clip_min"], node.params["clip_max"]) == ("CLIP", -0.3, 0.7)
    assert graph.node("prob").inputs[0] is node.outputs[0]


def test_eltwise_leakyrelu_and_relu6():
    b = GraphBuilder("t")
    x = b.input("x", [1, 4, 4, 3])
    e1 = b.layer("Eltwise", "mul", [x, x], {"method": "MUL", "with_activation": "NONE",
                                           "negative_slope_value": 0.5})[0]
    l1 = act(b, "leaky", e1, "LEAKYRELU")  # default slope: the stale 0.5 must go
    e2 = b.layer("Eltwise", "sub", [l1, x], {"method": "SUB"})[0]
    graph = b.build([act(b, "relu6", e2, "RELU6")])
    check_stage1(graph, [torch.randn(1, 4, 4, 3) * 4], {"leaky", "relu6"})
    assert "negative_slope_value" not in graph.node("mul").params
    assert graph.node("sub").params["with_activation"] == "RELU6"


def test_no_fusion_when_the_tensor_has_another_reader_or_is_an_output():
    b = GraphBuilder("t")
    x = b.input("x", [1, 5, 5, 3])
    c1 = conv(b, "conv1", x)
    n1 = bn(b, "bn1", c1)
    side = b.layer("Eltwise", "side", [c1, n1], {"method": "ADD"})[0]  # second reader of conv1
    c2 = conv(b, "conv2", x)
    r2 = act(b, "relu2", c2, "RELU")  # conv2 is also a graph output
    s3 = b.layer("Eltwise", "add3", [x, x], {"method": "ADD"})[0]
    r3 = act(b, "relu3", s3, "RELU")
    t3 = act(b, "tanh3", s3, "TANH")  # second reader of add3
    graph = b.build([side, r2, c2, r3, t3])
    check_stage1(graph, [torch.randn(1, 5, 5, 3)], set())


def test_no_fusion_of_unfusable_pairs():
    b = GraphBuilder("t")
    x = b.input("x", [1, 5, 5, 3])
    r = bn(b, "bn_after_relu", conv(b, "conv_relu", x, act="RELU"))  # BN after an activation
    s = act(b, "sigmoid", conv(b, "conv_sig", x), "SIGMOID")  # not a fusable method
    p = b.layer("Pooling", "pool", [x], dict(CONV, method="MAX", kernel_x=2, kernel_y=2, pad_left=0,
                                              pad_right=0, pad_top=0, pad_bottom=0))[0]
    q = act(b, "relu_pool", p, "RELU")  # Pooling carries no with_activation
    c = act(b, "relu_twice", conv(b, "conv_has_act", x, act="RELU6"), "RELU")
    graph = b.build([r, s, q, c])
    check_stage1(graph, [torch.randn(1, 5, 5, 3)], set())


def test_no_folding_of_a_batchnorm_off_the_channel_axis():
    b = GraphBuilder("t")
    x = b.input("x", [3, 5, 6])
    fc = b.layer("FullyConnected", "fc", [x], {"num_output": 4}, {"weights": torch.randn(4, 6)})[0]
    y = b.layer("BatchNorm", "bn_axis1", [fc], {"axis": 1}, {"weights": torch.rand(5), "biases": torch.randn(5)})[0]
    graph = b.build([y])
    check_stage1(graph, [torch.randn(3, 5, 6)], set())


def test_unfusable_activation_is_split_into_its_own_layer():
    """A fused SELU (params with it) becomes Conv + Activation SELU: outputs unchanged,
    the tensor readers see keeps its name, and both layers then quantize."""
    b = GraphBuilder("t")
    b.input("x", [1, 6, 6, 3])
    c = b.layer("Convolution", "c", ["x"], dict(CONV, with_activation="SELU", alpha=1.5, gamma=1.1),
                {"weights": torch.randn(4, 3, 3, 3), "biases": torch.randn(4)})[0]
    g = b.build([act(b, "sig", c, "SIGMOID")])
    x = torch.randn(2, 6, 6, 3)
    before = g.forward([x])[0].clone()
    run_stage1(g)
    assert [(n.name, n.type) for n in g.nodes] == [("x", "Input"), ("c", "Convolution"), ("c_selu", "Activation"),
                                                  ("sig", "Activation")]
    conv_node, split = g.node("c"), g.node("c_selu")
    assert conv_node.params["with_activation"] == "NONE" and "alpha" not in conv_node.params
    assert split.params == {"method": "SELU", "alpha": 1.5, "gamma": 1.1}
    assert split.outputs[0].name == c and g.node("sig").inputs[0].name == c
    torch.testing.assert_close(g.forward([x])[0], before)


# ---- merge_matmul_mul ---------------------------------------------------------------------
def attention_scores(shared=True, negative=False, reader=False, eltwise=False):
    """q and k ([1, 4, 6] each) scaled by one Constant (shared: as PyTorch's attention
    exports; else one each), reshaped and transposed, then q @ k^T; the scores scaled by a
    scalar BatchNorm after a Reshape (`eltwise`: by an Eltwise MUL with a Constant of the
    scores' shape, as npuopt-export writes attention)."""
    b = GraphBuilder("t")
    q, k = b.input("q", [1, 4, 6]), b.input("k", [1, 4, 6])
    value = torch.tensor([-0.5 if negative else 0.5])
    scale = b.layer("Constant", "scale", [], {}, {"weights": value})[0]
    scale_k = scale if shared else b.layer("Constant", "scale_k", [], {}, {"weights": value * 2})[0]
    qs = b.layer("Mul", "mul_q", [q, scale])[0]
    ks = b.layer("Mul", "mul_k", [scale_k, k])[0]
    qr = b.layer("Reshape", "reshape_q", [qs], {"shape": [1, 4, 6]})[0]
    kt = b.layer("Transpose", "transpose_k", [ks], {"perm": [0, 2, 1]})[0]
    scores = b.layer("MatMul", "scores", [qr, kt], {"trans_a": False, "trans_b": False})[0]
    flat = b.layer("Reshape", "flat", [scores], {"shape": [1, 16]})[0]
    if eltwise:
        quarter = b.layer("Constant", "quarter", [], {}, {"weights": torch.full((1, 16), 0.25)})[0]
        out = b.layer("Eltwise", "bn", [flat, quarter], {"method": "MUL", "with_activation": "NONE"})[0]
    else:
        out = b.layer("BatchNorm", "bn", [flat], {"axis": -1},
                      {"weights": torch.full((16,), 0.25), "biases": torch.zeros(16)})[0]
    tops = [out] + ([b.layer("Abs", "other", [ks])[0]] if reader else [])
    return b.build(tops), [torch.randn(1, 4, 6), torch.randn(1, 4, 6)]


def test_scalings_next_to_a_matmul_become_its_fused_multiplier():
    for shared, eltwise in ((True, False), (False, True)):
        graph, inputs = attention_scores(shared, eltwise=eltwise)
        check_stage1(graph, inputs, {"mul_q", "mul_k", "bn", "scale", "scale_k", "quarter"})
        assert graph.node("scores").params["fused_multiplier"] == 0.5 * (0.5 if shared else 1.0) * 0.25


def test_no_merge_of_a_negative_scale_a_scaling_read_elsewhere_or_a_disabled_pass():
    graph, inputs = attention_scores(negative=True)   # the tool chain folds positive factors only
    check_stage1(graph, inputs, {"bn"})
    graph, inputs = attention_scores(reader=True)     # k's scaled values are read by another layer too
    check_stage1(graph, inputs, {"mul_q", "bn"})
    assert graph.node("scores").params["fused_multiplier"] == 0.125
    graph, inputs = attention_scores()
    run_stage1(graph, merge_matmul_scales=False)
    assert "fused_multiplier" not in graph.node("scores").params and graph.node("mul_q") is not None


def test_a_merged_matmul_computes_its_multiplier_quantized_and_in_float(tmp_path):
    """Quantized, the factor is in the MatMul's rescale and leaves its params; kept in
    float, the IR keeps fused_multiplier and npuopt-run multiplies by it too."""
    import numpy as np
    from conftest import npuopt_run_outputs
    from npuopt.ir import read_graph, write_graph
    from npuopt.quant.quantizer import build_quantized_graph, float_layers
    from npuopt.quant.settings import QuantSettings
    from test_quantize_ops import batches, dequantized, quantize
    graph, inputs = attention_scores()
    run_stage1(graph)
    want = graph.forward(inputs)[0]
    quantize(graph, batches((4, 6), (4, 6)))  # calibrated
    for matmul_float in (False, True):
        settings = {n.name: QuantSettings(trigger_float_op="float16_preferred" if matmul_float and n.type == "MatMul"
                                          else False) for n in graph.nodes}
        qg, _ = build_quantized_graph(graph, settings, float_layers(graph, settings))
        node = qg.node("scores")
        assert ("fused_multiplier" in node.params) == matmul_float and node.quantized != matmul_float
        got = qg.forward(inputs)[0]
        out = qg.output_tensors[0]
        assert torch.nn.functional.cosine_similarity(dequantized(out, got).flatten(), want.flatten(), dim=0) > 0.99
        path = tmp_path / "q_o.txt"
        write_graph(qg, str(path))
        back = read_graph(str(path))
        assert torch.equal(back.forward(inputs)[0], got)
        ran = npuopt_run_outputs(path, inputs[0].numpy(), tmp_path, inputs[1].numpy())[out.name]
        assert np.array_equal(ran, got.numpy())
