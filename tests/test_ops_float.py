"""Float forwards of every layer type against plain PyTorch (NCHW) or NumPy references."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npuopt.ops  # noqa: F401  (registers the forwards; the Resize tests bypass GraphBuilder)
from npuopt.errors import IRError
from npuopt.graph import QuantizeGraph
from npuopt.ir.builder import GraphBuilder
from npuopt.node import PyNode
from npuopt.tensor import PyTensor

torch.manual_seed(0)


def nhwc(x):
    return x.permute(0, 2, 3, 1).contiguous()


def run(optype, inputs, params=None, constants=None, n_tops=1):
    """Build a one-layer graph with GraphBuilder and forward it; returns the tops."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x) for i, x in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, constants, n_tops=n_tops)
    outs = b.build(tops).forward(list(inputs))
    return outs if n_tops > 1 else outs[0]


def close(got, want, tol=1e-5):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


# ---- Convolution --------------------------------------------------------------
CONV_CASES = [
    # cin, cout, k(h,w), stride(h,w), dilation(h,w), pads(t,b,l,r), group, act
    (3, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "NONE"),
    (4, 6, (3, 2), (2, 1), (1, 1), (0, 2, 1, 0), 2, "RELU"),
    (6, 6, (3, 3), (2, 2), (1, 1), (1, 0, 0, 1), 6, "RELU6"),
    (4, 8, (3, 3), (1, 1), (2, 3), (2, 2, 3, 3), 1, "NONE"),
    (8, 8, (5, 5), (1, 2), (2, 1), (4, 3, 1, 2), 8, "NONE"),
]


@pytest.mark.parametrize("cin,cout,k,stride,dil,pads,group,act", CONV_CASES)
def test_convolution(cin, cout, k, stride, dil, pads, group, act):
    x = torch.randn(2, cin, 9, 10)
    w = torch.randn(cout, cin // group, *k)
    bias = torch.randn(cout)
    top, bottom, left, right = pads
    params = dict(kernel_y=k[0], kernel_x=k[1], stride_y=stride[0], stride_x=stride[1],
                  dilation_y=dil[0], dilation_x=dil[1], pad_top=top, pad_bottom=bottom,
                  pad_left=left, pad_right=right, group=group, num_output=cout, with_activation=act)
    got = run("Convolution", [nhwc(x)], params, {"weights": nhwc(w), "biases": bias})
    want = F.conv2d(F.pad(x, (left, right, top, bottom)), w, bias, stride, 0, dil, group)
    want = {"NONE": want, "RELU": F.relu(want), "RELU6": F.relu6(want)}[act]
    close(got, nhwc(want), 1e-4)


# ---- Pooling ------------------------------------------------------------------
def pool_params(method, k, s, pads, ceil_mode=False, count_include_pad=False):
    top, bottom, left, right = pads
    return dict(method=method, kernel_y=k, kernel_x=k, stride_y=s, stride_x=s, pad_top=top,
                pad_bottom=bottom, pad_left=left, pad_right=right, ceil_mode=ceil_mode,
                count_include_pad=count_include_pad)


@pytest.mark.parametrize("method", ["MAX", "AVG"])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_pooling_symmetric_vs_torch(method, ceil_mode, count_include_pad):
    x = torch.randn(2, 3, 10, 11)
    got = run("Pooling", [nhwc(x)], pool_params(method, 3, 2, (1, 1, 1, 1), ceil_mode, count_include_pad))
    if method == "MAX":
        want = F.max_pool2d(x, 3, 2, 1, ceil_mode=ceil_mode)
    elif ceil_mode and count_include_pad:   # the tool chain also counts the ceil-mode overhang
        want = naive_pool(x, 3, 2, (1, 1, 1, 1), method, count_include_pad, got.shape[1:3])
    else:
        want = F.avg_pool2d(x, 3, 2, 1, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    close(got, nhwc(want))


def naive_pool(x, k, s, pads, method, count_include_pad, out_hw):
    """Window by window: values from inside the input; the divisor is the values inside,
    or with count_include_pad the whole kernel (pads and ceil-mode overhang alike, as the
    tool chain divides)."""
    top, bottom, left, right = pads
    n, c, h, w = x.shape
    out = torch.empty(n, c, *out_hw)
    for oh in range(out_hw[0]):
        for ow in range(out_hw[1]):
            r0, c0 = oh * s - top, ow * s - left
            rows = [r for r in range(r0, r0 + k) if 0 <= r < h]
            cols = [q for q in range(c0, c0 + k) if 0 <= q < w]
            win = x[:, :, rows][:, :, :, cols]
            if method == "MAX":
                out[:, :, oh, ow] = win.amax((2, 3))
            else:
                count = k * k if count_include_pad else len(rows) * len(cols)
                out[:, :, oh, ow] = win.sum((2, 3)) / count
    return out


@pytest.mark.parametrize("method", ["MAX", "AVG"])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("pads,ceil_mode", [((0, 2, 1, 0), False), ((2, 0, 0, 1), True), ((1, 2, 2, 0), True)])
def test_pooling_asymmetric_pads(method, count_include_pad, pads, ceil_mode):
    x = torch.randn(1, 2, 9, 8)
    got = run("Pooling", [nhwc(x)], pool_params(method, 3, 2, pads, ceil_mode, count_include_pad))
    close(got, nhwc(naive_pool(x, 3, 2, pads, method, count_include_pad, got.shape[1:3])))


def test_pooling_asymmetric_pads_vs_torch_fpad():
    x = torch.randn(1, 2, 9, 8)
    pads = (0, 2, 1, 0)
    got = run("Pooling", [nhwc(x)], pool_params("MAX", 3, 2, pads))
    close(got, nhwc(F.max_pool2d(F.pad(x, (1, 0, 0, 2), value=-math.inf), 3, 2)))
    got = run("Pooling", [nhwc(x)], pool_params("AVG", 3, 2, pads, count_include_pad=True))
    close(got, nhwc(F.avg_pool2d(F.pad(x, (1, 0, 0, 2)), 3, 2)))


# ---- Eltwise ------------------------------------------------------------------
@pytest.mark.parametrize("method,fn", [("ADD", torch.add), ("SUB", torch.sub), ("MUL", torch.mul),
                                       ("MAX", torch.maximum), ("MIN", torch.minimum)])
@pytest.mark.parametrize("shape_b", [(2, 4, 5, 3), (1, 1, 1, 3), (2, 4, 1, 1), (3,)])
def test_eltwise_broadcasting(method, fn, shape_b):
    a, b = torch.randn(2, 4, 5, 3), torch.randn(*shape_b)
    close(run("Eltwise", [a, b], {"method": method}), fn(a, b))


def test_eltwise_fused_activation():
    a, b = torch.randn(2, 4, 5, 3), torch.randn(2, 4, 5, 3)
    got = run("Eltwise", [a, b], {"method": "ADD", "with_activation": "CLIP", "clip_min": -0.5, "clip_max": 0.5})
    close(got, (a + b).clamp(-0.5, 0.5))


# ---- FullyConnected, MatMul ---------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 6)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_fully_connected(shape, with_bias):
    x, w, b = torch.randn(*shape), torch.randn(7, 6), torch.randn(7)
    constants = {"weights": w, "biases": b} if with_bias else {"weights": w}
    got = run("FullyConnected", [x], {"num_output": 7, "with_activation": "RELU"}, constants)
    want = x @ w.t() + (b if with_bias else 0)
    close(got, F.relu(want))


def test_fully_connected_wrong_weights():
    with pytest.raises(IRError, match="'op'"):
        run("FullyConnected", [torch.randn(2, 5)], {"num_output": 3}, {"weights": torch.randn(3, 4)})


@pytest.mark.parametrize("trans_a,trans_b,shape_a,shape_b", [
    (False, False, (2, 3, 4), (2, 4, 5)),
    (True, False, (2, 4, 3), (2, 4, 5)),
    (False, True, (2, 3, 4), (2, 5, 4)),
    (True, True, (2, 4, 3), (1, 5, 4)),
    (False, False, (2, 6, 3, 4), (4, 5)),
])
def test_matmul(trans_a, trans_b, shape_a, shape_b):
    a, b = torch.randn(*shape_a), torch.randn(*shape_b)
    got = run("MatMul", [a, b], {"trans_a": trans_a, "trans_b": trans_b})
    want = torch.matmul(a.transpose(-1, -2) if trans_a else a, b.transpose(-1, -2) if trans_b else b)
    close(got, want)


# ---- BatchNorm, LayerNorm -----------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 1, 3])
def test_batchnorm(axis):
    x = torch.randn(2, 4, 5, 6)
    c = x.shape[axis]
    w, b = torch.randn(c), torch.randn(c)
    shape = [1] * 4
    shape[axis] = c
    got = run("BatchNorm", [x], {"axis": axis}, {"weights": w, "biases": b})
    close(got, x * w.reshape(shape) + b.reshape(shape))


@pytest.mark.parametrize("axis", [[-1], [2], [1, 2], [-2, -1]])
def test_layernorm(axis):
    x = torch.randn(2, 4, 6) * 3 + 1
    shape = x.shape[min(a % 3 for a in axis):]
    w, b = torch.randn(shape), torch.randn(shape)
    got = run("LayerNorm", [x], {"axis": axis, "epsilon": 1e-6}, {"weights": w.flatten(), "biases": b})
    mean = x.mean(dim=[a % 3 for a in axis], keepdim=True)
    var = x.var(dim=[a % 3 for a in axis], keepdim=True, unbiased=False)
    close(got, (x - mean) / torch.sqrt(var + 1e-6) * w + b)


def test_layernorm_over_an_inner_axis():
    """The tool chain normalizes over any axes, weights shaped like them."""
    x = torch.randn(2, 4, 6)
    w, b = torch.randn(4), torch.randn(4)
    got = run("LayerNorm", [x], {"axis": [1], "epsilon": 1e-6}, {"weights": w, "biases": b})
    mean, var = x.mean(dim=1, keepdim=True), x.var(dim=1, keepdim=True, unbiased=False)
    close(got, (x - mean) / torch.sqrt(var + 1e-6) * w.reshape(1, 4, 1) + b.reshape(1, 4, 1))


def test_layernorm_weights_of_the_wrong_size():
    with pytest.raises(IRError, match="'op'.*'weights' has 6 values for 4"):
        run("LayerNorm", [torch.randn(2, 4, 6)], {"axis": [1]}, {"weights": torch.ones(6), "biases": torch.zeros(4)})


# ---- Reduce -------------------------------------------------------------------
@pytest.mark.parametrize("method,fn", [("MEAN", torch.mean), ("SUM", torch.sum),
                                       ("MAX", torch.amax), ("MIN", torch.amin)])
@pytest.mark.parametrize("axis", [[1, 2], [-1], [0, 3], 2])
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce(method, fn, axis, keepdims):
    x = torch.randn(2, 3, 4, 5)
    dims = [axis] if isinstance(axis, int) else axis
    got = run("Reduce", [x], {"method": method, "axis": axis, "keepdims": keepdims})
    close(got, fn(x, dim=dims, keepdim=keepdims))


def test_reduce_unknown_method():
    with pytest.raises(IRError, match="layer 'op'.*'MEDIAN'.*MEAN"):
        run("Reduce", [torch.randn(1, 2)], {"method": "MEDIAN", "axis": [1]})


# ---- Split, Slice -------------------------------------------------------------
@pytest.mark.parametrize("axis,splits", [(3, [1, 2, 3]), (1, [2, 2]), (-1, [6])])
def test_split(axis, splits):
    x = torch.randn(2, 4, 3, 6)
    got = run("Split", [x], {"axis": axis, "splits": splits}, n_tops=len(splits))
    for g, w in zip(got if len(splits) > 1 else [got], torch.split(x, splits, dim=axis)):
        close(g, w)


def test_split_bad_sizes():
    with pytest.raises(IRError, match="'op'"):
        run("Split", [torch.randn(1, 5)], {"axis": 1, "splits": [2, 2]}, n_tops=2)


@pytest.mark.parametrize("begin,end,strides", [
    ([0, 1, 0, 2], [1, 4, 5, 6], [1, 1, 2, 1]),
    ([0, -3, 1, -4], [1, -1, 100, 6], [1, 1, 3, 2]),
    ([0, 3, -1, 5], [1, 0, -100, -7], [1, -1, -2, -2]),
    ([0, 0, 2, 0], [1, 5, 2, 6], [1, 1, 1, 1]),
])
def test_slice(begin, end, strides):
    x = torch.randn(1, 5, 6, 7)
    got = run("Slice", [x], {"begin": begin, "end": end, "strides": strides})
    want = torch.from_numpy(x.numpy()[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].copy())
    close(got, want)


def test_slice_whole_batch_follows_the_run_batch():
    b = GraphBuilder("t")
    b.input("x", [1, 5, 6])
    b.layer("Slice", "op", ["x"], {"begin": [0, 1, 0], "end": [1, 4, 6], "strides": [1, 1, 2]})
    x = torch.randn(3, 5, 6)
    close(b.build(["op"]).forward([x])[0], x[:, 1:4, ::2])


# ---- Pad ----------------------------------------------------------------------
def test_pad_constant():
    x = torch.randn(2, 4, 5, 3)
    got = run("Pad", [x], {"pads": [[0, 0], [1, 2], [3, 0], [0, 1]], "mode": "CONSTANT", "constant_value": 1.5})
    close(got, nhwc(F.pad(x.permute(0, 3, 1, 2), (3, 0, 1, 2, 0, 1), value=1.5)))
    cropped = run("Pad", [x], {"pads": [[0, 0], [-1, 1], [0, -2], [0, 0]]})
    close(cropped, F.pad(x, (0, 0, 0, -2, -1, 1)))


def test_pad_reflect_vs_torch():
    x = torch.randn(2, 3, 5, 6)
    got = run("Pad", [nhwc(x)], {"pads": [[0, 0], [2, 1], [0, 3], [0, 0]], "mode": "REFLECT"})
    close(got, nhwc(F.pad(x, (0, 3, 2, 1), mode="reflect")))


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
@pytest.mark.parametrize("pads", [[[0, 0], [2, 3], [1, 0], [0, 2]], [[0, 0], [9, 7], [0, 0], [1, 1]]])
def test_pad_mirror_vs_numpy(mode, pads):
    x = torch.randn(1, 4, 3, 3)
    got = run("Pad", [x], {"pads": pads, "mode": mode.lower()})
    close(got, torch.from_numpy(np.pad(x.numpy(), pads, mode=mode.lower())))


# ---- Resize -------------------------------------------------------------------
def run_resize(x, method, mode, out_hw, **params):
    """Resize takes its output size from the top shape, which GraphBuilder cannot preset."""
    src = PyNode("x", "Input")
    src.outputs = [PyTensor("x", x, ir_shape=x.shape)]
    node = PyNode("op", "Resize")
    node.params.update(method=method, mode=mode, **params)
    node.inputs = [PyTensor("x")]
    node.outputs = [PyTensor("op", ir_shape=(x.shape[0], *out_hw, x.shape[3]))]
    graph = QuantizeGraph("t")
    graph.set_layers([src, node], ["x"], ["op"])
    return graph.forward([x])[0]


def naive_resize(x, method, mode, out_hw):
    """Pixel by pixel, NCHW, for the mappings PyTorch has no mode for."""
    n, c, h, w = x.shape
    out = torch.empty(n, c, *out_hw)

    def src(d, size, out_size):
        if mode == "align_corners":
            return d * (size - 1) / (out_size - 1) if out_size > 1 else 0.0
        return d * size / out_size

    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            sy, sx = src(oy, h, out_hw[0]), src(ox, w, out_hw[1])
            if method == "NEAREST":
                iy, ix = min(math.floor(sy + 0.5), h - 1), min(math.floor(sx + 0.5), w - 1)
                out[:, :, oy, ox] = x[:, :, iy, ix]
            else:
                y0, x0 = int(math.floor(sy)), int(math.floor(sx))
                y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                fy, fx = sy - y0, sx - x0
                top = x[:, :, y0, x0] * (1 - fx) + x[:, :, y0, x1] * fx
                bottom = x[:, :, y1, x0] * (1 - fx) + x[:, :, y1, x1] * fx
                out[:, :, oy, ox] = top * (1 - fy) + bottom * fy
    return out


SIZES = [(10, 14), (3, 4), (7, 5), (1, 1)]


@pytest.mark.parametrize("out_hw", SIZES)
@pytest.mark.parametrize("method,mode,nearest_mode,torch_kw", [
    ("NEAREST", "ASYMMETRIC", "FLOOR", dict(mode="nearest")),
    ("NEAREST", "HALF_PIXEL", "ROUND_PREFER_CEIL", dict(mode="nearest-exact")),
    ("BILINEAR", "HALF_PIXEL", "ROUND_PREFER_FLOOR", dict(mode="bilinear", align_corners=False)),
    ("BILINEAR", "ALIGN_CORNERS", "ROUND_PREFER_FLOOR", dict(mode="bilinear", align_corners=True)),
])
def test_resize_vs_torch(out_hw, method, mode, nearest_mode, torch_kw):
    x = torch.randn(2, 3, 5, 7)
    close(run_resize(nhwc(x), method, mode, out_hw, nearest_mode=nearest_mode),
          nhwc(F.interpolate(x, size=out_hw, **torch_kw)))


@pytest.mark.parametrize("out_hw", SIZES)
@pytest.mark.parametrize("method,mode", [("NEAREST", "align_corners"), ("BILINEAR", "asymmetric")])
def test_resize_vs_naive(out_hw, method, mode):
    """The naive nearest rounds halves up: ROUND_PREFER_CEIL."""
    x = torch.randn(2, 3, 5, 7)
    close(run_resize(nhwc(x), method, mode.upper(), out_hw, nearest_mode="ROUND_PREFER_CEIL"),
          nhwc(naive_resize(x, method, mode, out_hw)))


def test_resize_unsupported_mode():
    with pytest.raises(IRError, match="layer 'op'.*tf_crop_and_resize.*HALF_PIXEL"):
        run_resize(torch.randn(1, 2, 2, 1), "BILINEAR", "tf_crop_and_resize", (4, 4))


# ---- Softmax, Activation, Constant, Concat, Reshape, Transpose ----------------
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax(axis):
    x = torch.randn(2, 5, 4)
    got = run("Softmax", [x], {"axis": axis})
    e = torch.exp(x - x.amax(axis, keepdim=True))
    close(got, e / e.sum(axis, keepdim=True))


ACTIVATIONS = [
    ("RELU", {}, lambda x: torch.where(x > 0, x, 0.0)),
    ("RELU6", {}, lambda x: x.clamp(0, 6)),
    ("CLIP", {"clip_min": -1.0, "clip_max": 2.5}, lambda x: x.clamp(-1.0, 2.5)),
    ("LEAKYRELU", {"negative_slope_value": 0.2}, lambda x: torch.where(x > 0, x, 0.2 * x)),
    ("LEAKYRELU", {}, lambda x: torch.where(x > 0, x, 0.01 * x)),
    ("SIGMOID", {}, lambda x: 1 / (1 + torch.exp(-x))),
    ("TANH", {}, lambda x: (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)),
    ("SWISH", {}, lambda x: x / (1 + torch.exp(-x))),
    ("SILU", {}, lambda x: x / (1 + torch.exp(-x))),
    ("HARDSIGMOID", {}, lambda x: (x / 6 + 0.5).clamp(0, 1)),
    ("HARDSIGMOID", {"alpha": 0.2, "beta": 0.4}, lambda x: (x * 0.2 + 0.4).clamp(0, 1)),
    ("HARDSWISH", {}, lambda x: x * (x + 3).clamp(0, 6) / 6),
    ("GELU", {}, lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
    ("GELU", {"approximate": "tanh"},
     lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
]


@pytest.mark.parametrize("method,params,fn", ACTIVATIONS)
def test_activation(method, params, fn):
    x = torch.randn(2, 3, 4, 5) * 4
    close(run("Activation", [x], dict(method=method, **params)), fn(x))


def test_activation_unknown_method():
    with pytest.raises(IRError, match="'op'.*'SOFTMAX'"):
        run("Activation", [torch.randn(2)], {"method": "SOFTMAX"})


def test_constant():
    value = torch.randn(1, 3, 4)
    b = GraphBuilder("t")
    b.input("x", [1, 3, 4])
    b.layer("Constant", "c", [], constants={"weights": value})
    b.layer("Eltwise", "op", ["x", "c"], {"method": "ADD"})
    graph = b.build(["op", "c"])
    x = torch.randn(1, 3, 4)
    got, const = graph.forward([x])
    close(const, value)
    close(got, x + value)


def test_concat_reshape_transpose():
    a, b = torch.randn(2, 3, 4), torch.randn(2, 3, 2)
    close(run("Concat", [a, b], {"axis": -1}), torch.cat([a, b], -1))
    close(run("Reshape", [a], {"shape": [2, 12]}), a.reshape(2, 12))
    close(run("Transpose", [a], {"perm": [0, 2, 1]}), a.transpose(1, 2))
