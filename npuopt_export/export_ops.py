"""The aten-op handlers of the exporter: each maps one PyTorch op to IR layers.

A handler gets the exporter, the FX node and the op's arguments (constants as
tensors or numbers, computed values as Act/LazyPad) and returns the op's value.
Ops whose inputs are all constants never reach a handler: they are folded.
`HANDLERS` at the bottom is the table the exporter looks ops up in.
"""
import math
from functools import partial

import torch

from npuopt.errors import ExportError

from .export_graph import NHWC, Act, LazyPad, where

aten = torch.ops.aten
FLOAT_MAX = float(torch.finfo(torch.float32).max)


def _fail(ex, message: str):
    raise ExportError(f"{ex.node.target} in {where(ex.node)}: {message}")


def _const(ex, value, what: str) -> torch.Tensor:
    """A tensor argument that the IR stores as a layer constant."""
    if not isinstance(value, torch.Tensor):
        _fail(ex, f"the {what} is computed by the model; the IR needs it constant")
    return value.detach().to(torch.float32)


def _pair(value):
    value = [value] if isinstance(value, int) else list(value)
    return tuple(value * 2 if len(value) == 1 else value)


def _window(kernel, stride, padding, dilation):
    (kh, kw), (sh, sw) = _pair(kernel), _pair(stride or kernel)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    return {"kernel_x": kw, "kernel_y": kh, "stride_x": sw, "stride_y": sh, "pad_left": pw, "pad_right": pw,
            "pad_top": ph, "pad_bottom": ph, "dilation_x": dw, "dilation_y": dh}


def _image(ex, x) -> Act:
    act = ex.act(x)
    if act.rank != 4:
        _fail(ex, f"takes a 4-D (N, C, H, W) input here, got {act.rank}-D")
    return ex.need(act, NHWC)


# ---- layout-only ops: no layer, or a Reshape --------------------------------------
def identity(ex, node, x, *args, **kwargs):
    """dropout (eval), clone, contiguous, alias, detach: the value itself."""
    return x


def reshape(ex, node, x, *args, **kwargs):
    """view, reshape, flatten, unflatten, squeeze, unsqueeze: the node knows its output shape."""
    return ex.reshape(x, ex.out_shape)


def permute(ex, node, x, dims):
    return ex.permute(x, dims)


def transpose(ex, node, x, dim0, dim1):
    dims = list(range(ex.act(x).rank))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return ex.permute(x, dims)


def t(ex, node, x):
    return ex.permute(x, [1, 0] if ex.act(x).rank == 2 else [0])


def expand(ex, node, x, size, implicit=False):
    act = ex.act(x)
    if act.shape != ex.out_shape:
        _fail(ex, f"expanding a computed tensor {list(act.shape)} to {list(ex.out_shape)} has no IR form")
    return act


# ---- convolution, pooling, normalization ------------------------------------------
def conv2d(ex, node, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    weight = _const(ex, weight, "convolution weight")
    if weight.dim() != 4:
        _fail(ex, f"only 2-D convolution has an IR form (weights are {weight.dim()}-D)")
    kh, kw = weight.shape[2:]
    (dh, dw) = _pair(dilation)
    if padding == "same":
        th, tw = dh * (kh - 1), dw * (kw - 1)
        pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    else:
        ph, pw = _pair(padding)
        pads = (ph, ph, pw, pw)
    if isinstance(x, LazyPad):
        pads = tuple(a + b for a, b in zip(pads, x.pads))
        x = x.act
    params = _window((kh, kw), stride, 0, dilation)
    params.update(pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3], group=groups,
                  num_output=weight.shape[0], with_activation="NONE")
    biases = _const(ex, bias, "convolution bias") if bias is not None else torch.zeros(weight.shape[0])
    return ex.emit("Convolution", [_image(ex, x)], params,
                   {"weights": weight.permute(0, 2, 3, 1), "biases": biases}, perm=NHWC)


def convolution(ex, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        _fail(ex, "transposed convolution has no IR form in npuopt")
    return conv2d(ex, node, x, weight, bias, stride, padding, dilation, groups)


def batch_norm_inference(ex, node, x, weight, bias, running_mean, running_var, momentum, eps):
    """BatchNorm with its statistics folded in: y = x·scale + shift along the channel axis."""
    x = ex.act(x)
    mean = _const(ex, running_mean, "running mean").double()
    var = _const(ex, running_var, "running variance").double()
    gamma = _const(ex, weight, "weight").double() if weight is not None else torch.ones_like(mean)
    beta = _const(ex, bias, "bias").double() if bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + eps)
    out = ex.emit("BatchNorm", [x], {"axis": x.ir_axis(1)},
                  {"weights": scale.float(), "biases": (beta - mean * scale).float()}, shape=x.shape)
    return out, None, None


def batch_norm(ex, node, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    if training:
        _fail(ex, "batch norm in training mode: export the model in eval mode")
    return batch_norm_inference(ex, node, x, weight, bias, running_mean, running_var, momentum, eps)[0]


def layer_norm(ex, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    act = ex.act(x)
    k, rank = len(normalized_shape), act.rank
    tail = tuple(range(rank - k, rank))
    if act.perm[rank - k:] != tail:
        act = ex.need(act, range(rank))
    shape = tuple(normalized_shape)
    weights = _const(ex, weight, "weight") if weight is not None else torch.ones(shape)
    biases = _const(ex, bias, "bias") if bias is not None else torch.zeros(shape)
    return ex.emit("LayerNorm", [act], {"axis": list(tail), "epsilon": float(eps)},
                   {"weights": weights, "biases": biases})


def max_pool2d(ex, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    params = dict(_window(kernel_size, stride, padding, dilation), method="MAX", ceil_mode=bool(ceil_mode))
    return ex.emit("Pooling", [_image(ex, x)], params, perm=NHWC)


def avg_pool2d(ex, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if divisor_override is not None:
        _fail(ex, "avg_pool2d with divisor_override has no IR form")
    params = dict(_window(kernel_size, stride, padding, 1), method="AVG", ceil_mode=bool(ceil_mode),
                  count_include_pad=bool(count_include_pad))
    return ex.emit("Pooling", [_image(ex, x)], params, perm=NHWC)


def adaptive_avg_pool2d(ex, node, x, output_size):
    act = ex.act(x)
    (h, w), (oh, ow) = act.shape[2:], _pair(output_size)
    if (oh, ow) == (1, 1):
        return _reduce(ex, "MEAN", act, [2, 3], True)
    if h % oh or w % ow:
        _fail(ex, f"adaptive pooling of {h}x{w} to {oh}x{ow} has uneven windows (no IR form)")
    return avg_pool2d(ex, node, act, (h // oh, w // ow), (h // oh, w // ow))


def _reduce(ex, method, x, dims, keepdim) -> Act:
    act = ex.act(x)
    dims = sorted({d % act.rank for d in dims} if dims else range(act.rank))
    if keepdim:
        perm = act.perm
    else:
        perm = tuple(p - sum(d < p for d in dims) for p in act.perm if p not in dims)
    return ex.emit("Reduce", [act], {"method": method, "axis": sorted(act.ir_axis(d) for d in dims),
                                     "keepdims": bool(keepdim)}, perm=perm)


def reduce(method, ex, node, x, dim=None, keepdim=False, dtype=None):
    return _reduce(ex, method, x, dim, keepdim)


def softmax(ex, node, x, dim, *args, **kwargs):
    act = ex.act(x)
    return ex.emit("Softmax", [act], {"axis": act.ir_axis(dim)})


# ---- activations -------------------------------------------------------------------
def activation(method, ex, node, x, **params):
    return ex.emit("Activation", [ex.act(x)], {"method": method, **params})


def _clip(ex, x, low, high):
    if (low, high) == (0, None):
        return activation("RELU", ex, ex.node, x)
    if (low, high) == (0, 6):
        return activation("RELU6", ex, ex.node, x)
    low = -FLOAT_MAX if low is None else float(low)
    high = FLOAT_MAX if high is None else float(high)
    return activation("CLIP", ex, ex.node, x, clip_min=low, clip_max=high)


def hardtanh(ex, node, x, min_val=-1.0, max_val=1.0):
    return _clip(ex, x, min_val, max_val)


def clamp(ex, node, x, min=None, max=None):
    return _clip(ex, x, min, max)


def leaky_relu(ex, node, x, negative_slope=0.01):
    return activation("LEAKYRELU", ex, node, x, negative_slope_value=float(negative_slope))


def hardsigmoid(ex, node, x):
    return activation("HARDSIGMOID", ex, node, x, alpha=1 / 6, beta=0.5)


def gelu(ex, node, x, approximate="none"):
    return activation("GELU", ex, node, x, approximate=approximate)


# ---- elementwise -------------------------------------------------------------------
def _operands(ex, a, b):
    """Both operands as IR tensors of the output's rank in one layout; constants and
    numbers become Constant layers."""
    shape = ex.out_shape
    rank = len(shape)
    acts = [ex.act(v) for v in (a, b) if isinstance(v, (Act, LazyPad))]
    full = [v for v in acts if v.rank == rank] or acts
    perm = next((v.perm for v in full if v.perm == NHWC), full[0].perm)
    if len(perm) != rank:
        perm = tuple(range(rank))
    out = []
    for v in (a, b):
        if isinstance(v, (Act, LazyPad)):
            v = ex.act(v)
            if v.rank < rank:
                v = ex.reshape(v, (1,) * (rank - v.rank) + v.shape)
            out.append(ex.need(v, perm))
        else:
            out.append(ex.constant(v, perm))
    return out, perm


def _is_number(v, value) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == value


def _eltwise(ex, method, a, b):
    if isinstance(a, (Act, LazyPad)) and ex.act(a).shape == ex.out_shape and (
            (method in ("ADD", "SUB") and _is_number(b, 0)) or (method == "MUL" and _is_number(b, 1))):
        return ex.act(a)
    (ia, ib), perm = _operands(ex, a, b)
    return ex.emit("Eltwise", [ia, ib], {"method": method, "with_activation": "NONE"}, perm=perm)


def _scaled(ex, b, alpha):
    if alpha == 1:
        return b
    if isinstance(b, (Act, LazyPad)):
        _fail(ex, f"alpha={alpha} on a computed operand has no IR form")
    return b * alpha


def add(ex, node, a, b, alpha=1):
    return _eltwise(ex, "ADD", a, _scaled(ex, b, alpha))


def sub(ex, node, a, b, alpha=1):
    return _eltwise(ex, "SUB", a, _scaled(ex, b, alpha))


def rsub(ex, node, a, b, alpha=1):
    return _eltwise(ex, "SUB", b, _scaled(ex, a, alpha))


def mul(ex, node, a, b):
    return _eltwise(ex, "MUL", a, b)


def div(ex, node, a, b):
    """Division by a constant is a multiplication by its reciprocal (Eltwise has no DIV)."""
    if isinstance(b, (Act, LazyPad)):
        _fail(ex, "division by a computed tensor has no IR form (Eltwise has no DIV)")
    return _eltwise(ex, "MUL", a, 1.0 / torch.as_tensor(b, dtype=torch.float32))


def maximum(ex, node, a, b):
    return _eltwise(ex, "MAX", a, b)


def minimum(ex, node, a, b):
    return _eltwise(ex, "MIN", a, b)


# ---- linear algebra ----------------------------------------------------------------
def _fully_connected(ex, x, weights, biases) -> Act:
    act = ex.act(x)
    if act.perm[-1] != act.rank - 1:
        act = ex.need(act, range(act.rank))
    if biases is None:
        biases = torch.zeros(weights.shape[0])
    return ex.emit("FullyConnected", [act], {"num_output": weights.shape[0], "with_activation": "NONE"},
                   {"weights": weights.contiguous(), "biases": biases})


def linear(ex, node, x, weight, bias=None):
    bias = _const(ex, bias, "bias") if bias is not None else None
    return _fully_connected(ex, x, _const(ex, weight, "weight"), bias)


def addmm(ex, node, bias, x, weight_t, beta=1, alpha=1):
    if isinstance(bias, (Act, LazyPad)):
        _fail(ex, "the added term is computed by the model; the IR needs it constant")
    weights = _const(ex, weight_t, "weight").t() * alpha
    biases = (_const(ex, bias, "bias") * beta).reshape(-1).expand(weights.shape[0])
    return _fully_connected(ex, x, weights, biases)


def _matmul_operand(ex, v):
    """An IR tensor for one MatMul side and whether the IR holds its last two axes swapped."""
    act = ex.act(v)
    lead = tuple(range(act.rank - 2))
    if act.rank >= 2 and act.perm[:-2] == lead:
        if act.perm[-2:] == (act.rank - 2, act.rank - 1):
            return act, False
        return act, True
    return ex.need(act, range(act.rank)), False


def _matmul(ex, a, b, suffix=None) -> Act:
    (ia, ta), (ib, tb) = _matmul_operand(ex, a), _matmul_operand(ex, b)
    shape = torch.broadcast_shapes(ia.shape[:-2], ib.shape[:-2]) + (ia.shape[-2], ib.shape[-1])
    return ex.emit("MatMul", [ia, ib], {"trans_a": ta, "trans_b": tb}, shape=shape,
                   perm=tuple(range(len(shape))), suffix=suffix)


def matmul(ex, node, a, b):
    if isinstance(b, torch.Tensor) and b.dim() == 2:
        return _fully_connected(ex, a, _const(ex, b, "weight").t(), None)
    for v in (a, b):
        if not isinstance(v, (Act, LazyPad)) or ex.act(v).rank < 2:
            _fail(ex, "matmul of a constant (other than a 2-D right operand) or of a 1-D tensor has no IR form")
    return _matmul(ex, a, b)


def scaled_dot_product_attention(ex, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    """softmax(q·kᵀ·scale)·v as MatMul, Eltwise MUL, Softmax and MatMul."""
    if attn_mask is not None or is_causal or enable_gqa:
        _fail(ex, "attention with a mask, is_causal or enable_gqa has no IR form in npuopt")
    scale = 1.0 / math.sqrt(ex.act(q).shape[-1]) if scale is None else scale
    scores = _matmul(ex, q, ex.permute(k, list(range(ex.act(k).rank - 2)) + [-1, -2]), "qk")
    scaled = ex.emit("Eltwise", [scores, ex.constant(scale, scores.perm)],
                     {"method": "MUL", "with_activation": "NONE"}, shape=scores.shape, suffix="scale")
    probs = ex.emit("Softmax", [scaled], {"axis": scaled.rank - 1}, shape=scores.shape, suffix="softmax")
    return _matmul(ex, probs, v)


# ---- joining, splitting, padding, resizing -----------------------------------------
def cat(ex, node, tensors, dim=0):
    rank = len(ex.out_shape)
    acts = [ex.act(v) for v in tensors if isinstance(v, (Act, LazyPad))]
    perm = next((a.perm for a in acts if a.perm == NHWC), acts[0].perm)
    parts = [ex.need(v, perm) if isinstance(v, (Act, LazyPad)) else ex.constant(v, perm) for v in tensors
             if not (isinstance(v, torch.Tensor) and v.numel() == 0)]
    return ex.emit("Concat", parts, {"axis": perm.index(dim % rank)}, perm=perm)


def split(ex, node, x, split_size, dim=0):
    act = ex.act(x)
    return ex.emit_split(act, act.ir_axis(dim), [tuple(v.shape) for v in node.meta["val"]])


def _slice(ex, act, dim, start, end, step, keep=False):
    """A Slice layer, none where it picks the whole axis (unless `keep`)."""
    dim = dim % act.rank
    picked = range(act.shape[dim])[slice(start, end, step)]
    if len(picked) == act.shape[dim] and picked.step == 1 and not keep:
        return act
    ir_shape = [act.shape[p] for p in act.perm]
    begin, stop, strides = [0] * act.rank, list(ir_shape), [1] * act.rank
    axis = act.ir_axis(dim)
    begin[axis], stop[axis], strides[axis] = picked.start, picked.stop, picked.step
    shape = tuple(len(picked) if a == dim else s for a, s in enumerate(act.shape))
    return ex.emit("Slice", [act], {"begin": begin, "end": stop, "strides": strides}, shape=shape)


def slice_(ex, node, x, dim=0, start=None, end=None, step=1):
    return _slice(ex, ex.act(x), dim, start, end, step)


def select(ex, node, x, dim, index):
    act = ex.act(x)
    index = index % act.shape[dim]
    return ex.reshape(_slice(ex, act, dim, index, index + 1, 1), ex.out_shape)


def pad(ex, node, x, pads, mode="constant", value=None):
    act = ex.act(x)
    per_axis = [[0, 0] for _ in range(act.rank)]
    for i in range(0, len(pads), 2):
        per_axis[act.rank - 1 - i // 2] = [pads[i], pads[i + 1]]
    value = 0.0 if value is None else float(value)
    if mode == "constant" and value == 0 and act.rank == 4 and per_axis[0] == per_axis[1] == [0, 0] \
            and min(pads) >= 0:
        return LazyPad(act, tuple(per_axis[2] + per_axis[3]), node)
    modes = {"constant": "CONSTANT", "reflect": "REFLECT"}
    if mode not in modes:
        _fail(ex, f"pad mode '{mode}' has no IR form (constant, reflect)")
    return ex.emit_pad(act, per_axis, modes[mode], value)


def constant_pad_nd(ex, node, x, pads, value=0):
    return pad(ex, node, x, pads, "constant", value)


def _resize(ex, x, method, mode, scale_factors):
    act = ex.act(x)
    out_hw = ex.out_shape[2:]
    if scale_factors and mode != "align_corners" and any(
            o != i * s for o, i, s in zip(out_hw, act.shape[2:], scale_factors)):
        _fail(ex, f"scale factors {list(scale_factors)} do not give whole output sizes "
                  f"({list(act.shape[2:])} -> {list(out_hw)}); pass size= or recompute_scale_factor=True")
    return ex.emit("Resize", [_image(ex, act)], {"method": method, "mode": mode}, perm=NHWC, top_shape=True)


def upsample_nearest2d(ex, node, x, output_size, scale_factors):
    return _resize(ex, x, "NEAREST", "asymmetric", scale_factors)


def upsample_nearest_exact2d(ex, node, x, output_size, scale_factors):
    return _resize(ex, x, "NEAREST", "half_pixel", scale_factors)


def upsample_bilinear2d(ex, node, x, output_size, align_corners, scale_factors):
    return _resize(ex, x, "BILINEAR", "align_corners" if align_corners else "half_pixel", scale_factors)


HANDLERS = {
    # layout only
    aten.dropout.default: identity,
    aten.clone.default: identity,
    aten.contiguous.default: identity,
    aten.alias.default: identity,
    aten.detach.default: identity,
    aten.view.default: reshape,
    aten.reshape.default: reshape,
    aten._unsafe_view.default: reshape,
    aten.flatten.using_ints: reshape,
    aten.unflatten.int: reshape,
    aten.squeeze.default: reshape,
    aten.squeeze.dim: reshape,
    aten.squeeze.dims: reshape,
    aten.unsqueeze.default: reshape,
    aten.permute.default: permute,
    aten.transpose.int: transpose,
    aten.t.default: t,
    aten.expand.default: expand,
    # convolution, pooling, normalization
    aten.conv2d.default: conv2d,
    aten.conv2d.padding: conv2d,
    aten.convolution.default: convolution,
    aten._native_batch_norm_legit_no_training.default: batch_norm_inference,
    aten.batch_norm.default: batch_norm,
    aten.layer_norm.default: layer_norm,
    aten.max_pool2d.default: max_pool2d,
    aten.avg_pool2d.default: avg_pool2d,
    aten.adaptive_avg_pool2d.default: adaptive_avg_pool2d,
    aten.mean.dim: partial(reduce, "MEAN"),
    aten.mean.default: partial(reduce, "MEAN"),
    aten.sum.default: partial(reduce, "SUM"),
    aten.sum.dim_IntList: partial(reduce, "SUM"),
    aten.amax.default: partial(reduce, "MAX"),
    aten.amin.default: partial(reduce, "MIN"),
    aten.softmax.int: softmax,
    aten._softmax.default: softmax,
    # activations
    aten.relu.default: partial(activation, "RELU"),
    aten.relu6.default: partial(activation, "RELU6"),
    aten.hardtanh.default: hardtanh,
    aten.clamp.default: clamp,
    aten.leaky_relu.default: leaky_relu,
    aten.sigmoid.default: partial(activation, "SIGMOID"),
    aten.tanh.default: partial(activation, "TANH"),
    aten.silu.default: partial(activation, "SWISH"),
    aten.hardsigmoid.default: hardsigmoid,
    aten.hardswish.default: partial(activation, "HARDSWISH"),
    aten.gelu.default: gelu,
    # elementwise
    aten.add.Tensor: add,
    aten.sub.Tensor: sub,
    aten.rsub.Scalar: rsub,
    aten.mul.Tensor: mul,
    aten.div.Tensor: div,
    aten.maximum.default: maximum,
    aten.minimum.default: minimum,
    # linear algebra
    aten.linear.default: linear,
    aten.addmm.default: addmm,
    aten.matmul.default: matmul,
    aten.mm.default: matmul,
    aten.bmm.default: matmul,
    aten.scaled_dot_product_attention.default: scaled_dot_product_attention,
    # joining, splitting, padding, resizing
    aten.cat.default: cat,
    aten.split.Tensor: split,
    aten.split_with_sizes.default: split,
    aten.slice.Tensor: slice_,
    aten.select.int: select,
    aten.pad.default: pad,
    aten.constant_pad_nd.default: constant_pad_nd,
    aten.upsample_nearest2d.vec: upsample_nearest2d,
    aten._upsample_nearest_exact2d.vec: upsample_nearest_exact2d,
    aten.upsample_bilinear2d.vec: upsample_bilinear2d,
}
