"""Convolution family: float forwards of ConvTranspose, Convolution3D and
ConvTranspose3D against PyTorch / a direct scatter reference, their quantized
forms (weights cut back to O/group rows, dequantized outputs close to float), the
one-line IRErrors of impossible params, and fused activations of every method in float."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from npuopt.errors import IRError
from test_ops_float import run
from test_quantize_ops import batches, check, one_layer, quantize


@pytest.fixture(autouse=True)
def _seed():
    """Each test draws its own numbers, whatever ran before it."""
    torch.manual_seed(0)


CONV_3x3 = dict(kernel_y=3, kernel_x=3, stride_y=1, stride_x=2, pad_top=1, pad_bottom=1, pad_left=0, pad_right=2,
                dilation_x=1, dilation_y=1)
AXES = {2: ("y", "x"), 3: ("z", "y", "x")}
PADS = {2: ("pad_top", "pad_bottom", "pad_left", "pad_right"),
        3: ("pad_z_begin", "pad_z_end", "pad_y_begin", "pad_y_end", "pad_x_begin", "pad_x_end")}


def params_of(kernel, stride, pads, dilation, group, cout, act="NONE", **extra):
    dims = len(kernel)
    p = {f"kernel_{a}": k for a, k in zip(AXES[dims], kernel)}
    p.update({f"stride_{a}": s for a, s in zip(AXES[dims], stride)})
    p.update({f"dilation_{a}": d for a, d in zip(AXES[dims], dilation)})
    p.update(dict(zip(PADS[dims], pads)), group=group, num_output=cout, with_activation=act, **extra)
    return p


def to_ir(w_torch, transposed):
    """torch weights ([O, C/g, *k] or transposed [C, O/g, *k]) in the IR's layout:
    [O(/g), kh, kw(, kd), C(/g)]."""
    w = w_torch.transpose(0, 1) if transposed else w_torch
    return w.permute(0, 2, 3, 1) if w.dim() == 4 else w.permute(0, 3, 4, 2, 1)


def last(x):
    return x.permute(0, *range(2, x.dim()), 1).contiguous()


def scatter_transpose(x, w, bias, stride, dilation, group, pads, output_padding):
    """Reference transposed convolution by definition (NCHW / NCDHW, torch weights
    [C, O/g, *k]): every input pixel adds its weighted kernel at stride * position +
    dilation * tap, then the pads are cropped off."""
    x, w = x.double().numpy(), w.double().numpy()
    n, c = x.shape[:2]
    sp = x.shape[2:]
    k = w.shape[2:]
    og = w.shape[1]
    cg = c // group
    full = [(i - 1) * s + d * (kk - 1) + 1 + op for i, s, d, kk, op in zip(sp, stride, dilation, k, output_padding)]
    out = np.zeros((n, og * group) + tuple(full))
    for pos in np.ndindex(*sp):
        for tap in np.ndindex(*k):
            at = tuple(p * s + t * d for p, s, t, d in zip(pos, stride, tap, dilation))
            for g in range(group):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]           # [n, cg]
                ws = w[(slice(g * cg, (g + 1) * cg), slice(None)) + tap]           # [cg, og]
                out[(slice(None), slice(g * og, (g + 1) * og)) + at] += xs @ ws
    out += bias.double().numpy().reshape((1, -1) + (1,) * len(sp))
    crop = tuple(slice(b, f - e) for (b, e), f in zip(pads, full))
    return torch.from_numpy(out[(slice(None), slice(None)) + crop]).float()


# ---- ConvTranspose / ConvTranspose3D ------------------------------------------------
TRANSPOSE_CASES = [
    # cin, cout, kernel, stride, dilation, pads ((b, e) per axis), group, output_padding
    (8, 4, (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0)), 1, (0, 0)),
    (3, 5, (3, 2), (2, 3), (1, 1), ((1, 0), (0, 1)), 1, (1, 1)),
    (4, 6, (3, 3), (2, 1), (1, 2), ((1, 1), (2, 2)), 2, (0, 0)),
    (6, 6, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 6, (0, 0)),
    (4, 2, (2, 2, 2), (2, 2, 2), (1, 1, 1), ((0, 0),) * 3, 1, (0, 0, 0)),
    (4, 4, (3, 2, 3), (1, 2, 2), (2, 1, 1), ((1, 0), (0, 1), (1, 1)), 2, (0, 0, 0)),
]


@pytest.mark.parametrize("cin,cout,kernel,stride,dilation,pads,group,out_pad", TRANSPOSE_CASES)
def test_conv_transpose_float(cin, cout, kernel, stride, dilation, pads, group, out_pad):
    dims = len(kernel)
    x = torch.randn((2, cin) + (3,) * dims)
    w = torch.randn((cin, cout // group) + kernel)
    bias = torch.randn(cout)
    extra = dict(output_padding_y=out_pad[0], output_padding_x=out_pad[1]) if dims == 2 else {}
    params = params_of(kernel, stride, sum(pads, ()), dilation, group, cout, "RELU", **extra)
    optype = "ConvTranspose" if dims == 2 else "ConvTranspose3D"
    got = run(optype, [last(x)], params, {"weights": to_ir(w, True), "biases": bias})
    want = F.relu(scatter_transpose(x, w, bias, stride, dilation, group, pads, out_pad))
    torch.testing.assert_close(got, last(want), rtol=1e-4, atol=1e-4)


def test_conv_transpose_symmetric_pads_match_torch_padding():
    x, w, bias = torch.randn(1, 3, 5, 4), torch.randn(3, 2, 3, 3), torch.randn(2)
    params = params_of((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, 2, output_padding_y=1, output_padding_x=0)
    got = run("ConvTranspose", [last(x)], params, {"weights": to_ir(w, True), "biases": bias})
    want = F.conv_transpose2d(x, w, bias, 2, 1, (1, 0))
    torch.testing.assert_close(got, last(want), rtol=1e-5, atol=1e-5)


# ---- Convolution3D ---------------------------------------------------------------------
@pytest.mark.parametrize("cin,cout,kernel,stride,dilation,pads,group", [
    (3, 4, (2, 3, 3), (1, 2, 1), (1, 1, 1), (1, 0, 1, 1, 0, 2), 1),
    (4, 6, (3, 2, 3), (2, 1, 1), (1, 2, 2), (1, 1, 0, 1, 2, 2), 2),
    (4, 4, (1, 3, 2), (1, 1, 2), (1, 1, 1), (0, 0, 1, 1, 0, 1), 4),
])
def test_convolution3d_float(cin, cout, kernel, stride, dilation, pads, group):
    x = torch.randn(2, cin, 4, 5, 6)
    w = torch.randn((cout, cin // group) + kernel)
    bias = torch.randn(cout)
    got = run("Convolution3D", [last(x)], params_of(kernel, stride, pads, dilation, group, cout, "RELU6"),
              {"weights": to_ir(w, False), "biases": bias})
    zb, ze, yb, ye, xb, xe = pads
    want = F.relu6(F.conv3d(F.pad(x, (xb, xe, yb, ye, zb, ze)), w, bias, stride, 0, dilation, group))
    torch.testing.assert_close(got, last(want), rtol=1e-4, atol=1e-4)


# ---- quantized --------------------------------------------------------------------------
@pytest.mark.parametrize("weights_method", ["per_tensor_symmetric_restricted_range",
                                            "per_channel_symmetric_restricted_range", "per_channel_asymmetric"])
@pytest.mark.parametrize("optype,kernel,group", [("ConvTranspose", (3, 3), 2), ("ConvTranspose", (2, 2), 1),
                                                 ("ConvTranspose3D", (2, 2, 2), 2)])
def test_conv_transpose_quantized(tmp_path, weights_method, optype, kernel, group):
    dims = len(kernel)
    cin, cout = 4, 6
    w = torch.randn((cin, cout // group) + kernel) * torch.linspace(0.1, 3.0, cout // group).reshape(
        (1, -1) + (1,) * dims)    # output channels of very different size
    params = params_of(kernel, (2,) * dims, (1, 0) * dims if kernel[0] == 3 else (0,) * 2 * dims, (1,) * dims,
                       group, cout, "RELU")
    graph = one_layer(optype, [(3,) * dims + (cin,)], params, {"weights": to_ir(w, True), "biases": torch.randn(cout)})
    qg, *_ = check(graph, batches((3,) * dims + (cin,)), tmp_path, tol_lsb=4.0, min_cos=0.99,
                   quantize_method_for_weight=weights_method, quantize_method_for_activation="per_tensor_asymmetric")
    c = qg.nodes[-1].constants["weights"]
    assert tuple(c.betensor.shape) == tuple(to_ir(w, True).shape)     # cut back to O/group rows
    if "per_channel" in weights_method:
        assert c.scale.numel() == cout // group
        assert qg.nodes[-1].constants["scale"].betensor.numel() == cout


def test_convolution3d_quantized(tmp_path):
    w = torch.randn(6, 2, 2, 3, 3)
    params = params_of((2, 3, 3), (1, 2, 1), (1, 0, 1, 1, 0, 2), (1, 1, 1), 2, 6, "RELU6")
    graph = one_layer("Convolution3D", [(3, 5, 4, 4)], params, {"weights": to_ir(w, False), "biases": torch.randn(6)})
    # 36 taps: the input's rounding errors add up to a few output LSBs
    check(graph, batches((3, 5, 4, 4)), tmp_path, tol_lsb=6.0, quantize_method_for_activation="per_tensor_asymmetric")


# ---- one-line errors -----------------------------------------------------------------------
def conv2d_layer(optype="Convolution", cin=4, cout=6, group=1, weights_shape=None, bias_len=None, **over):
    params = params_of((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), group, cout)
    params.update(over)
    transposed = optype == "ConvTranspose"
    shape = weights_shape or ((cout // group, 3, 3, cin) if transposed else (cout, 3, 3, cin // group))
    constants = {"weights": torch.randn(shape), "biases": torch.randn(bias_len or cout)}
    return lambda: run(optype, [torch.randn(1, 5, 5, cin)], params, constants)


ERRORS = [
    (conv2d_layer(kernel_x=0), "kernel_x must be a positive integer, got 0"),
    (conv2d_layer(stride_y=-1), "stride_y must be a positive integer, got -1"),
    (conv2d_layer(stride_x=1.5), "stride_x must be a positive integer, got 1.5"),
    (conv2d_layer(dilation_y=0), "dilation_y must be a positive integer"),
    (conv2d_layer(pad_left=-1), "pad_left must be a non-negative integer, got -1"),
    (conv2d_layer(weights_shape=(6, 3, 3, 4), group=0), "group must be a positive integer, got 0"),
    (conv2d_layer(group=3, weights_shape=(6, 3, 3, 1)), "group=3 does not divide the 4 input channels"),
    (conv2d_layer(cout=6, group=4, cin=4, weights_shape=(6, 3, 3, 1)), "group=4 does not divide"),
    (conv2d_layer(weights_shape=(6, 3, 2, 4)), "weights [6, 3, 2, 4] do not fit kernel [3, 3]"),
    (conv2d_layer(weights_shape=(6, 3, 3, 2)), "do not fit kernel [3, 3], group 1 and 4 input channels"),
    (conv2d_layer(num_output=5), "num_output=5 but the weights give 6 output channels"),
    (conv2d_layer(bias_len=5), "biases have 5 values for 6 output channels"),
    (conv2d_layer("DepthwiseConv", cin=4, cout=8, group=4, multiplier=3), "multiplier=3 does not fit group 4"),
    (conv2d_layer("DepthwiseConv", cin=4, cout=8, group=4, multiplier=0), "multiplier=0"),
    (conv2d_layer("ConvTranspose", weights_shape=(6, 3, 3, 5)), "weights [6, 3, 3, 5] do not fit"),
    (conv2d_layer("ConvTranspose", group=2, weights_shape=(6, 3, 3, 4)), "num_output=6 but the weights give 12 output"),
    (conv2d_layer("ConvTranspose", output_padding_x=1), "output_padding [0, 1] must be smaller than the stride"),
    (conv2d_layer("ConvTranspose", output_padding_y=-1), "output_padding_y must be a non-negative integer"),
    (conv2d_layer("ConvTranspose", kernel_y=None), "kernel_y must be a positive integer, got None"),
]


@pytest.mark.parametrize("fn,message", ERRORS)
def test_param_errors_are_one_line(fn, message):
    with pytest.raises(IRError) as e:
        fn()
    text = str(e.value)
    assert message in text and "\n" not in text and "layer 'op'" in text


def test_conv3d_param_errors():
    params = params_of((2, 3, 3), (1, 1, 1), (0,) * 6, (1, 1, 1), 1, 4)
    x = torch.randn(1, 3, 5, 5, 3)
    good = torch.randn(4, 3, 3, 2, 3)       # [O, kh, kw, kd, C]
    assert run("Convolution3D", [x], params, {"weights": good}).shape == (1, 2, 3, 3, 4)
    with pytest.raises(IRError, match=r"weights \[4, 2, 3, 3, 3\] do not fit kernel \[2, 3, 3\]"):
        run("Convolution3D", [x], params, {"weights": torch.randn(4, 2, 3, 3, 3)})
    with pytest.raises(IRError, match="pad_z_end must be a non-negative integer, got -2"):
        run("Convolution3D", [x], dict(params, pad_z_end=-2), {"weights": good})
    with pytest.raises(IRError, match="stride_z must be a positive integer"):
        run("ConvTranspose3D", [x], dict(params, stride_z=0, num_output=3), {"weights": good.transpose(0, -1)})


# ---- fused activations the tool chain cannot fuse ------------------------------------------
@pytest.mark.parametrize("method", ["SIGMOID", "SELU", "SILU", "HARDSWISH", "GELU", "TANH", "elu"])
@pytest.mark.parametrize("optype", ["Convolution", "ConvTranspose", "FullyConnected"])
def test_unfusable_activation_runs_in_float(optype, method):
    """The float forward computes any fused method (the stage-1 pass split_activation
    moves it into its own layer before quantization, tests/test_passes.py)."""
    from npuopt.node import PyNode
    from npuopt.ops.activation import FLOAT_ACTIVATIONS
    torch.manual_seed(0)
    if optype == "FullyConnected":
        x, w = torch.randn(2, 8), torch.randn(3, 8)
        got = run("FullyConnected", [x], dict(num_output=3, with_activation=method), {"weights": w})
        plain = run("FullyConnected", [x], dict(num_output=3), {"weights": w})
    else:
        got = conv2d_layer(optype, with_activation=method)()
        torch.manual_seed(0)
        plain = conv2d_layer(optype)()
    defaults = PyNode("act", "Activation")     # the method's default params
    torch.testing.assert_close(got, FLOAT_ACTIVATIONS[method.upper()](defaults, plain))
    assert not torch.equal(got, plain)


@pytest.mark.parametrize("method", ["NONE", "relu", "RELU6", "CLIP", "LEAKYRELU"])
def test_fusable_activations_still_run(method):
    out = conv2d_layer("ConvTranspose", with_activation=method, clip_min=-0.5, clip_max=0.5,
                       negative_slope_value=0.1)()
    assert out.shape == (1, 5, 5, 6)


# ---- the quantized forward by parts of the samples and tiles of the output stage -----------
@pytest.mark.parametrize("act", ["NONE", "RELU", "RELU6", "CLIP", "LEAKYRELU", "PRELU"])
@pytest.mark.parametrize("optype,group", [("Convolution", 1), ("DepthwiseConv", 8), ("FullyConnected", 1)])
def test_quantized_forward_by_parts_and_tiles_is_the_whole_forward(monkeypatch, optype, group, act):
    """Convolutions run their samples in parts and the output stage in tiles of rows
    (ops/convolution.py PART_BYTES, ops/_linear.py TILE_ELEMENTS): with parts of 2 samples
    and tiles of 5 rows (a shorter last one) the integers are those of one pass over all."""
    import npuopt.ops._linear as linear
    import npuopt.ops.convolution as convolution
    params = dict(with_activation=act, negative_slope_value=0.1, clip_min=-0.5, clip_max=1.0, num_output=8)
    if optype == "FullyConnected":
        shape, constants = (8,), {"weights": torch.randn(8, 8) * 0.3}
    else:
        params.update(CONV_3x3, group=group)
        shape, constants = (6, 6, 8), {"weights": torch.randn(8, 3, 3, 8 // group) * 0.3}
    constants["biases"] = torch.randn(8) * 0.2
    if act == "PRELU":
        constants["negative_slope"] = torch.rand(8) * 0.3
    data = batches(shape, n=2, batch=7)
    qg = quantize(one_layer(optype, [shape], params, constants), data,
                  quantize_method_for_activation="per_tensor_asymmetric")
    x = data[-1][0]
    qx = qg.forward([x], keep_tensors=True) and qg.nodes[-1].inputs[0].betensor.clone()
    node = qg.node("op")

    def forward():
        node.inputs[0].betensor = qx
        return node.forward().clone()

    whole = forward()
    monkeypatch.setattr(linear, "TILE_ELEMENTS", 5 * 8)
    monkeypatch.setattr(convolution, "PART_BYTES", 2 * 4 * (qx[:1].numel() + whole[:1].numel()))
    assert torch.equal(forward(), whole)
    assert len(set(whole.flatten().tolist())) > 4    # the layer computes something
