"""Convolution (and DepthwiseConv: the same with group = C), FullyConnected and MatMul."""
import numpy as np

from ..intmath import absmax, check_range, exact_matmul, requantize
from .activation import fused_float
from .geometry import window_params, windows
from .stage import (biases_with_zp, fused_method, output_stage, refuse_ahead_shift, rescale, shifted, top_bounds,
                    weights_with_zp)


def grouped_conv(patches: np.ndarray, weights: np.ndarray, group: int, matmul) -> np.ndarray:
    """Sum over each window of patches [N, OH, OW, KH, KW, C] times weights
    [O, KH, KW, C/group]; `matmul` does the products (float or exact integer)."""
    n, oh, ow, kh, kw, c = patches.shape
    o = weights.shape[0]
    cg, og = c // group, o // group
    p = patches.reshape(n * oh * ow, kh * kw, group, cg)
    w = weights.reshape(group, og, kh * kw, cg)
    if group == 1:
        out = matmul(p.reshape(-1, kh * kw * c), w.reshape(og, kh * kw * cg).T)
    elif cg == 1:  # depthwise: no matrix product to speak of, sum of elementwise products
        out = np.einsum("pkg,gok->pgo", p[..., 0], w[..., 0]).reshape(-1, o)
    else:
        out = np.concatenate([matmul(p[:, :, g, :].reshape(-1, kh * kw * cg), w[g].reshape(og, -1).T)
                              for g in range(group)], axis=1)
    return out.reshape(n, oh, ow, o)


def check_conv(layer, x, weights):
    group = int(layer.param("group", 1))
    c, o = x.shape[-1], weights.shape[0]
    if weights.ndim != 4 or group < 1 or c % group or o % group or weights.shape[3] * group != c:
        raise layer.error(f"weights {list(weights.shape)} and group {group} do not fit {c} input channels")
    return group


def conv_float(layer, xs, infos):
    x = xs[0]
    weights = layer.const("weights").astype(np.float32)
    group = check_conv(layer, x, weights)
    out = grouped_conv(windows(x, window_params(layer), np.float32(0)), weights, group, np.matmul)
    if layer.has_const("biases"):
        out = out + layer.const("biases").astype(np.float32)
    return [fused_float(layer, out.astype(np.float32))]


def linear_weights(layer, x_info) -> np.ndarray:
    """W = weights + weights_zp of a layer with weights (no ahead shift)."""
    w = weights_with_zp(layer)
    refuse_ahead_shift(layer, x_info.dtype, layer.const_types["weights"])
    return w


def linear_output(layer, acc: np.ndarray, channels: int) -> np.ndarray:
    """acc + B (B = biases + biases_zp), then the output stage with the fused activation."""
    return output_stage(layer, acc + biases_with_zp(layer, channels), fused_method(layer), *rescale(layer, channels))


def conv_int(layer, xs, infos):
    """acc = sum over each window of q' * W + B, q' the input integers padded with -zp_x
    (real zero: the biases hold zp_x * sum W), W = weights + weights_zp, B = biases +
    biases_zp; then the output stage. Exact (the tool chain sums in float64, exact below 2^53)."""
    q = xs[0]
    _, zp_x = infos[0].quant(layer)
    w = linear_weights(layer, infos[0])
    group = check_conv(layer, q, w)
    patches = windows(q, window_params(layer), np.int64(-zp_x))
    check_range(layer, max(absmax(q), abs(zp_x)) * absmax(w) * int(np.prod(w.shape[1:])), "an accumulator")
    acc = grouped_conv(patches, w, group, lambda p, k: exact_matmul(layer, p, k))
    return [linear_output(layer, acc, w.shape[0])]


def fc_float(layer, xs, infos):
    weights = layer.const("weights").astype(np.float32)
    out = np.matmul(xs[0], weights.T)
    if layer.has_const("biases"):
        out = out + layer.const("biases").astype(np.float32)
    return [fused_float(layer, out.astype(np.float32))]


def fc_int(layer, xs, infos):
    """acc[..., o] = sum_i q[..., i] * W[o, i] + B[o] (the input zero point is folded into
    the biases), W and B as for Convolution; the output stage (per-channel numbers along
    the output's last axis)."""
    q = xs[0]
    w = linear_weights(layer, infos[0])
    if w.ndim != 2 or w.shape[1] != q.shape[-1]:
        raise layer.error(f"weights {list(w.shape)} do not fit {q.shape[-1]} input features", "weights_shape")
    acc = exact_matmul(layer, q.reshape(-1, q.shape[-1]), w.T).reshape(q.shape[:-1] + (w.shape[0],))
    return [linear_output(layer, acc, w.shape[0])]


def matmul_operands(layer, xs):
    a, b = xs
    if layer.param("trans_a", False):
        a = np.swapaxes(a, -1, -2)
    if layer.param("trans_b", False):
        b = np.swapaxes(b, -1, -2)
    return a, b


def matmul_float(layer, xs, infos):
    return [np.matmul(*matmul_operands(layer, xs)).astype(np.float32)]


def matmul_int(layer, xs, infos):
    """z = A @ B (after trans_a/trans_b), A = q_a + zp_a, B = q_b + zp_b, exactly (the tool
    chain sums in float32, which is exact while partial sums stay below 2^24), then
    requantize with the layer's rescale; no activation."""
    refuse_ahead_shift(layer, *(info.dtype for info in infos))
    a, b = matmul_operands(layer, [shifted(x, info, layer) for x, info in zip(xs, infos)])
    z = exact_matmul(layer, a, b)
    return [requantize(layer, z, *rescale(layer, z.shape[-1]), *top_bounds(layer))]


FLOAT = {"Convolution": conv_float, "DepthwiseConv": conv_float, "FullyConnected": fc_float,
         "MatMul": matmul_float}
INT = {"Convolution": conv_int, "DepthwiseConv": conv_int, "FullyConnected": fc_int, "MatMul": matmul_int}
