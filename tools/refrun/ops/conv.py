"""Convolution, FullyConnected and MatMul."""
import numpy as np

from ..intmath import absmax, check_range, exact_matmul
from .activation import fused_float
from .geometry import window_params, windows
from .stage import activation_of, int_param, multiplier, output_stage, shifted, weights_with_zp


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


def conv_int(layer, xs, infos):
    """acc = sum W*A over each window (A = q + zp_x padded with real 0, W = weights
    + weights_zp[o]); z = acc + biases; then the output stage."""
    a = shifted(xs[0], infos[0], layer)
    w = weights_with_zp(layer)
    group = check_conv(layer, a, w)
    activation = activation_of(layer, "with_activation")
    patches = windows(a, window_params(layer), np.int64(0))
    check_range(layer, absmax(a) * absmax(w) * int(np.prod(w.shape[1:])), "an accumulator")
    z = grouped_conv(patches, w, group, lambda p, q: exact_matmul(layer, p, q))
    if layer.has_const("biases"):
        z = z + layer.const("biases").reshape(-1)
    return [output_stage(layer, z, *multiplier(layer, z.shape[-1]), activation)]


def fc_float(layer, xs, infos):
    weights = layer.const("weights").astype(np.float32)
    out = np.matmul(xs[0], weights.T)
    if layer.has_const("biases"):
        out = out + layer.const("biases").astype(np.float32)
    return [fused_float(layer, out.astype(np.float32))]


def fc_int(layer, xs, infos):
    """acc[..., o] = sum_i W[o, i] * A[..., i]; z = acc + biases; the output stage
    (per-channel numbers along the output's last axis)."""
    a = shifted(xs[0], infos[0], layer)
    w = weights_with_zp(layer)
    if w.ndim != 2 or w.shape[1] != a.shape[-1]:
        raise layer.error(f"weights {list(w.shape)} do not fit {a.shape[-1]} input features", "weights_shape")
    activation = activation_of(layer, "with_activation")
    z = exact_matmul(layer, a.reshape(-1, a.shape[-1]), w.T).reshape(a.shape[:-1] + (w.shape[0],))
    if layer.has_const("biases"):
        z = z + layer.const("biases").reshape(-1)
    return [output_stage(layer, z, *multiplier(layer, z.shape[-1]), activation)]


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
    """z = A @ B (after trans_a/trans_b), the output stage with scale_value/shift_value, no activation."""
    a, b = matmul_operands(layer, [shifted(x, info, layer) for x, info in zip(xs, infos)])
    z = exact_matmul(layer, a, b)
    return [output_stage(layer, z, int_param(layer, "scale_value"), int_param(layer, "shift_value"), "NONE")]


FLOAT = {"Convolution": conv_float, "FullyConnected": fc_float, "MatMul": matmul_float}
INT = {"Convolution": conv_int, "FullyConnected": fc_int, "MatMul": matmul_int}
