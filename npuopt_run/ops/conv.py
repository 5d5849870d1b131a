"""Convolutions (Convolution, DepthwiseConv: the same with group = C; Convolution3D;
ConvTranspose, ConvTranspose3D), FullyConnected and MatMul.

Channels last (NHWC / NDHWC). Weights as the IR stores them: [O, kh, kw, C/g]
(3-D: [O, kh, kw, kd, C/g]) for the direct convolutions, [O/g, kh, kw, C] (3-D:
[O/g, kh, kw, kd, C]) for the transposed ones. A transposed convolution is computed
as a direct one: the input spread out by the stride (zeros between), padded by
dilation * (kernel - 1) on each side (+ output_padding at the end), convolved at
stride 1 with the kernel flipped and the in/out channels swapped per group, then
pad_begin/pad_end cropped off each axis.

fp8 layers (a top in an fp8 format, stage.fp8_output_stage): the products of the
format's values summed in float64 (exact), the float32 biases, the rescale; the
transposed convolutions have no fp8 form."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import minifloat
from ..intmath import absmax, check_range, exact_matmul, requantize
from .activation import fused_float
from .stage import (AHEAD_SHIFTED, ahead_shift, biases_with_zp, float_weights, fp8_output_stage, fp8_scale,
                    fused_method, output_stage, refuse_ahead_shift, rescale, shifted, top_bounds,
                    weights_with_zp)

AXES = {2: ("y", "x"), 3: ("z", "y", "x")}
PADS = {2: (("pad_top", "pad_bottom"), ("pad_left", "pad_right")),
        3: (("pad_z_begin", "pad_z_end"), ("pad_y_begin", "pad_y_end"), ("pad_x_begin", "pad_x_end"))}
DIMS = {"Convolution": 2, "DepthwiseConv": 2, "ConvTranspose": 2, "Convolution3D": 3, "ConvTranspose3D": 3}
TRANSPOSED = ("ConvTranspose", "ConvTranspose3D")


def _count(layer, key, default, minimum) -> int:
    v = layer.param(key) if default is None else layer.param(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < minimum:
        raise layer.error(f"'{key}' must be an integer >= {minimum}, got {v!r}", key)
    return int(v)


def window(layer, dims: int) -> dict:
    """kernel, stride, dilation, (begin, end) pads and output_padding per spatial axis
    (outermost first), and group."""
    axes = AXES[dims]
    out_pad = [f"output_padding_{a}" for a in axes] if layer.type == "ConvTranspose" else []
    return dict(kernel=[_count(layer, f"kernel_{a}", None, 1) for a in axes],
                stride=[_count(layer, f"stride_{a}", 1, 1) for a in axes],
                dilation=[_count(layer, f"dilation_{a}", 1, 1) for a in axes],
                pads=[(_count(layer, b, 0, 0), _count(layer, e, 0, 0)) for b, e in PADS[dims]],
                output_padding=[_count(layer, k, 0, 0) for k in out_pad] or [0] * dims,
                group=_count(layer, "group", 1, 1))


def spatial_weights(w: np.ndarray, dims: int) -> np.ndarray:
    """IR weights with their kernel axes in the input's order (3-D: [.., kd, kh, kw, ..])."""
    return np.transpose(w, (0, 3, 1, 2, 4)) if dims == 3 else w


def nd_windows(x: np.ndarray, win: dict, fill) -> np.ndarray:
    """[N, *out, *kernel, C]: the input pixels under every window (pads hold `fill`)."""
    dims = x.ndim - 2
    x = np.pad(x, [(0, 0)] + [tuple(p) for p in win["pads"]] + [(0, 0)], constant_values=fill)
    spans = [d * (k - 1) + 1 for k, d in zip(win["kernel"], win["dilation"])]
    if any(size < span for size, span in zip(x.shape[1:-1], spans)):
        return np.zeros((x.shape[0],) + (0,) * dims + tuple(win["kernel"]) + (x.shape[-1],), x.dtype)
    view = sliding_window_view(x, spans, axis=tuple(range(1, dims + 1)))
    view = view[(slice(None),) + tuple(slice(None, None, s) for s in win["stride"]) + (slice(None),)
                + tuple(slice(None, None, d) for d in win["dilation"])]
    return np.moveaxis(view, dims + 1, -1)


def grouped_conv(patches: np.ndarray, weights: np.ndarray, group: int, matmul) -> np.ndarray:
    """Sum over each window of patches [N, *out, *k, C] times weights [O, *k, C/group]
    (kernel axes in the input's order); `matmul` does the products (float or exact integer)."""
    dims = weights.ndim - 2
    c, o = patches.shape[-1], weights.shape[0]
    out_shape = patches.shape[:1 + dims]
    k = int(np.prod(weights.shape[1:-1]))
    cg, og = c // group, o // group
    p = patches.reshape(-1, k, group, cg)
    w = weights.reshape(group, og, k, cg)
    if group == 1:
        out = matmul(p.reshape(-1, k * c), w.reshape(og, k * cg).T)
    elif cg == 1:  # depthwise: no matrix product to speak of, sum of elementwise products
        out = np.einsum("pkg,gok->pgo", p[..., 0], w[..., 0]).reshape(-1, o)
    else:
        out = np.concatenate([matmul(p[:, :, g, :].reshape(-1, k * cg), w[g].reshape(og, -1).T)
                              for g in range(group)], axis=1)
    return out.reshape(out_shape + (o,))


def check_weights(layer, x, weights, win, transposed: bool):
    """Weights [O, *k, C/g] (transposed: [O/g, *k, C]) against the input, kernel, group,
    num_output and biases; the number of output channels."""
    dims, g, c = x.ndim - 2, win["group"], x.shape[-1]
    o = weights.shape[0] * (g if transposed else 1)
    kernel = list(spatial_weights(weights, dims).shape[1:-1]) if weights.ndim == dims + 2 else None
    cin = weights.shape[-1] * (1 if transposed else g)
    if kernel != win["kernel"] or c % g or o % g or cin != c:
        raise layer.error(f"weights {list(weights.shape)} do not fit kernel {win['kernel']}, group {g} and {c} "
                          f"input channels", "weights_shape")
    if int(layer.param("num_output", o)) != o:
        raise layer.error(f"num_output {layer.param('num_output')} differs from the weights' {o} output channels",
                          "num_output")
    if layer.has_const("biases") and layer.const("biases").size != o:
        raise layer.error(f"{layer.const('biases').size} biases for {o} output channels", "biases_shape")
    return o


def as_direct(layer, x: np.ndarray, weights: np.ndarray, win: dict):
    """A transposed convolution as a direct one: (spread and padded input, flipped
    weights [O, *k, C/g], the window at stride 1, the crop per axis)."""
    dims, g = x.ndim - 2, win["group"]
    w = spatial_weights(weights, dims)
    og, kernel, c = w.shape[0], w.shape[1:-1], w.shape[-1]
    w = w.reshape((og,) + kernel + (g, c // g))
    w = np.moveaxis(w, -2, 0).reshape((g * og,) + kernel + (c // g,))
    w = np.flip(w, axis=tuple(range(1, dims + 1)))
    spread = np.zeros((x.shape[0],) + tuple((n - 1) * s + 1 for n, s in zip(x.shape[1:-1], win["stride"]))
                      + (c,), x.dtype)
    spread[(slice(None),) + tuple(slice(None, None, s) for s in win["stride"])] = x
    full = [d * (k - 1) for k, d in zip(win["kernel"], win["dilation"])]
    direct = dict(kernel=win["kernel"], stride=[1] * dims, dilation=win["dilation"],
                  pads=[(f, f + op) for f, op in zip(full, win["output_padding"])])
    if any(op >= max(s, d) for op, s, d in zip(win["output_padding"], win["stride"], win["dilation"])):
        raise layer.error(f"output_padding {win['output_padding']} must be below the stride or dilation")
    crop = (slice(None),) + tuple(slice(b, -e if e else None) for b, e in win["pads"])
    return spread, np.ascontiguousarray(w), direct, crop


def check_fusable(layer) -> None:
    """The tool chain fuses only the rescaling activations (stage.FUSABLE), in float too."""
    fused_method(layer)


def conv_float(layer, xs, infos):
    x, dims = xs[0], DIMS[layer.type]
    weights = float_weights(layer)
    win = window(layer, dims)
    check_fusable(layer)
    check_weights(layer, x, weights, win, layer.type in TRANSPOSED)
    if layer.type in TRANSPOSED:
        x, w, direct, crop = as_direct(layer, x, weights, win)
        out = grouped_conv(nd_windows(x, direct, np.float32(0)), w, win["group"], np.matmul)[crop]
    else:
        out = grouped_conv(nd_windows(x, win, np.float32(0)), spatial_weights(weights, dims), win["group"], np.matmul)
    if layer.has_const("biases"):
        out = out + layer.const("biases").astype(np.float32)
    return [fused_float(layer, out)]


def fp8_weights(layer) -> np.ndarray:
    """An fp8 layer's weights + weights_zp as float64: fp8 values (zero point 0), or
    integers (int4 weights with fp8 activations)."""
    w = layer.const("weights")
    if np.issubdtype(w.dtype, np.integer):
        return weights_with_zp(layer).astype(np.float64)
    return w.astype(np.float64)


def linear_weights(layer, x_info) -> np.ndarray:
    """W = weights + weights_zp of a layer with weights."""
    if layer.type not in AHEAD_SHIFTED:
        refuse_ahead_shift(layer, x_info.dtype, layer.const_types["weights"])
    return weights_with_zp(layer)


def linear_output(layer, acc: np.ndarray, channels: int, x_info, extra=0) -> np.ndarray:
    """acc + B + extra (B = biases + biases_zp; both shifted ahead first where the layer
    says so), then the output stage with the fused activation."""
    m, s = rescale(layer, channels)
    b = biases_with_zp(layer, channels)
    if layer.type in AHEAD_SHIFTED:
        acc, b, s = ahead_shift(layer, acc, b, s, x_info.dtype, layer.const_types["weights"])
    return output_stage(layer, acc + b + extra, fused_method(layer), m, s)


def conv_int(layer, xs, infos):
    """Direct: acc = sum over each window of q' * W + B, q' the input integers padded with
    -zp_x (real zero: the biases hold zp_x * sum W), W = weights + weights_zp, B = biases +
    biases_zp. Transposed: acc = conv_transpose(q + zp_x, W), cropped, + B - zp_x * S, S the
    sum of each IR weight row [kh, kw(, kd), C], repeated for every group. Then the output
    stage. Exact (the tool chain sums in float, exact below 2^24 / 2^53)."""
    q, dims = xs[0], DIMS[layer.type]
    _, zp_x = infos[0].quant(layer)
    if layer.top_types[0].minifloat and layer.type not in TRANSPOSED:
        w, win = fp8_weights(layer), window(layer, dims)
        o = check_weights(layer, q, w, win, False)
        acc = grouped_conv(nd_windows(q.astype(np.float64), win, np.float64(0)), spatial_weights(w, dims),
                           win["group"], np.matmul)
        return [fp8_output_stage(layer, acc, o)]
    w = linear_weights(layer, infos[0])
    win = window(layer, dims)
    o = check_weights(layer, q, w, win, layer.type in TRANSPOSED)
    check_range(layer, (absmax(q) + abs(zp_x)) * absmax(w) * int(np.prod(w.shape[1:])), "an accumulator")

    def matmul(p, k):
        return exact_matmul(layer, p, k)

    if layer.type in TRANSPOSED:
        x, wd, direct, crop = as_direct(layer, q + np.int64(zp_x), w, win)
        acc = grouped_conv(nd_windows(x, direct, np.int64(0)), wd, win["group"], matmul)[crop]
        row_sums = np.tile(w.reshape(w.shape[0], -1).sum(axis=1), win["group"])
        return [linear_output(layer, acc, o, infos[0], -np.int64(zp_x) * row_sums)]
    patches = nd_windows(q, win, np.int64(-zp_x))
    acc = grouped_conv(patches, spatial_weights(w, dims), win["group"], matmul)
    return [linear_output(layer, acc, o, infos[0])]


def fc_float(layer, xs, infos):
    check_fusable(layer)
    weights = float_weights(layer)
    out = np.matmul(xs[0], weights.T)
    if layer.has_const("biases"):
        out = out + layer.const("biases").astype(np.float32)
    return [fused_float(layer, out)]


def fc_int(layer, xs, infos):
    """acc[..., o] = sum_i q[..., i] * W[o, i] + B[o] (the input zero point is folded into
    the biases), W and B as for Convolution; the output stage (per-channel numbers along
    the output's last axis)."""
    q = xs[0]
    fp8_layer = layer.top_types[0].minifloat
    w = fp8_weights(layer) if fp8_layer else linear_weights(layer, infos[0])
    if w.ndim != 2 or w.shape[1] != q.shape[-1]:
        raise layer.error(f"weights {list(w.shape)} do not fit {q.shape[-1]} input features", "weights_shape")
    if fp8_layer:
        return [fp8_output_stage(layer, np.matmul(q.astype(np.float64), w.T), w.shape[0])]
    acc = exact_matmul(layer, q.reshape(-1, q.shape[-1]), w.T).reshape(q.shape[:-1] + (w.shape[0],))
    return [linear_output(layer, acc, w.shape[0], infos[0])]


def matmul_operands(layer, xs):
    a, b = xs
    if layer.param("trans_a", False):
        a = np.swapaxes(a, -1, -2)
    if layer.param("trans_b", False):
        b = np.swapaxes(b, -1, -2)
    return a, b


def matmul_float(layer, xs, infos):
    """A @ B, times the param fused_multiplier where the IR has one (float32)."""
    z = np.matmul(*matmul_operands(layer, xs))
    return [z * np.float32(layer.param("fused_multiplier")) if "fused_multiplier" in layer.params else z]


def matmul_int(layer, xs, infos):
    """z = A @ B (after trans_a/trans_b), A = q_a + zp_a, B = q_b + zp_b, exactly (the tool
    chain sums in float32, which is exact while partial sums stay below 2^24), then
    requantize with the layer's rescale; no activation."""
    if layer.top_types[0].minifloat:
        a, b = matmul_operands(layer, [x.astype(np.float64) for x in xs])
        return [minifloat.requantize(np.matmul(a, b), fp8_scale(layer, 1), layer.top_types[0].name)]
    refuse_ahead_shift(layer, *(info.dtype for info in infos))
    a, b = matmul_operands(layer, [shifted(x, info, layer) for x, info in zip(xs, infos)])
    z = exact_matmul(layer, a, b)
    return [requantize(layer, z, *rescale(layer, z.shape[-1]), *top_bounds(layer))]


FLOAT = {t: conv_float for t in DIMS}
FLOAT.update({"FullyConnected": fc_float, "MatMul": matmul_float})
INT = {t: conv_int for t in DIMS}
INT.update({"FullyConnected": fc_int, "MatMul": matmul_int})
