"""What the convolution layers share (Convolution, DepthwiseConv, ConvTranspose,
Convolution3D, ConvTranspose3D): their window params as the parser names them,
checked into one-line IRErrors before any torch call; their weight layouts; the
float forwards of direct and transposed convolutions in 2-D and 3-D; and the
quantize of the transposed ones.

Layouts (channels last; weights as the parser writes them):
* Convolution/DepthwiseConv: x NHWC, weights [O, kh, kw, C/group]
* Convolution3D: x NDHWC, weights [O, kh, kw, kd, C/group] (depth after width)
* ConvTranspose: weights [O/group, kh, kw, C]
* ConvTranspose3D: weights [O/group, kh, kw, kd, C]
A transposed layer computes torch's conv_transpose with zero padding, then crops
pad_begin/pad_end off each spatial axis (output_padding extends the end first)."""
import itertools
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ._linear import linear_output, quantize_linear

# per spatial rank: the axis letters (outermost first) and the pad param names of each axis
AXES = {2: ("y", "x"), 3: ("z", "y", "x")}
PAD_NAMES = {2: (("pad_top", "pad_bottom"), ("pad_left", "pad_right")),
             3: (("pad_z_begin", "pad_z_end"), ("pad_y_begin", "pad_y_end"), ("pad_x_begin", "pad_x_end"))}
# where the weights hold each spatial axis (in AXES order), after the output-channel axis
WEIGHT_AXES = {2: (1, 2), 3: (3, 1, 2)}


@dataclass
class Window:
    kernel: Tuple[int, ...]
    stride: Tuple[int, ...]
    dilation: Tuple[int, ...]
    pads: Tuple[Tuple[int, int], ...]          # (begin, end) per spatial axis
    output_padding: Tuple[int, ...]
    group: int

    @property
    def torch_pads(self):
        """The pads in F.pad's order (last axis first)."""
        return tuple(v for begin_end in reversed(self.pads) for v in begin_end)


def _int_param(node, key, default, minimum):
    v = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        what = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be {what}, got {v!r}")
    return v


def window(node, dims: int, transposed: bool = False) -> Window:
    """The checked window params of a `dims`-D layer (kernel required, the rest defaulted)."""
    axes = AXES[dims]
    return Window(
        kernel=tuple(_int_param(node, f"kernel_{a}", None, 1) for a in axes),
        stride=tuple(_int_param(node, f"stride_{a}", 1, 1) for a in axes),
        dilation=tuple(_int_param(node, f"dilation_{a}", 1, 1) for a in axes),
        pads=tuple((_int_param(node, b, 0, 0), _int_param(node, e, 0, 0)) for b, e in PAD_NAMES[dims]),
        output_padding=tuple(_int_param(node, f"output_padding_{a}", 0, 0) for a in axes) if transposed and dims == 2
        else (0,) * dims,
        group=_int_param(node, "group", 1, 1))


def patches(node, x: torch.Tensor, rows: torch.Tensor, real, dims: int, transposed: bool = False) -> torch.Tensor:
    """The input patches of a `dims`-D direct or transposed convolution's output positions
    `rows` (of its output as cropped), [groups, rows, taps * C/group] in the weights' row
    order (registry.patches_register). A transposed layer's tap k of output position o
    reads input (o + pad_begin - k * dilation) / stride where that is a whole position
    inside the input, else a real 0. Group g's patches read its input channels, direct or
    transposed (a grouped transposed layer's weight rows serve every group: group g's
    matrix is the columns of its input channels, _layers.as_matrices)."""
    w = window(node, dims, transposed)
    sizes = tuple(int(n) for n in x.shape[1:-1])
    if transposed:
        out = [(n - 1) * s + d * (k - 1) + 1 + p - b - e for n, s, d, k, p, (b, e)
               in zip(sizes, w.stride, w.dilation, w.kernel, w.output_padding, w.pads)]
    else:
        out = [(n + b + e - d * (k - 1) - 1) // s + 1 for n, s, d, k, (b, e) in zip(sizes, w.stride, w.dilation,
                                                                                    w.kernel, w.pads)]
    coords, rest = [], rows
    for size in reversed(out):
        coords.insert(0, rest % size)
        rest = rest // size
    index, inside = [], torch.ones((), dtype=torch.bool, device=x.device)
    for a, (o, n, s, d, k, (b, _)) in enumerate(zip(coords, sizes, w.stride, w.dilation, w.kernel, w.pads)):
        along = [1] * dims
        along[a] = k
        taps = (torch.arange(k, device=x.device) * d).reshape(1, *along)
        o = o.reshape(-1, *[1] * dims)
        if transposed:
            full = o + b - taps
            i, ok = torch.div(full, s, rounding_mode="floor"), full % s == 0
        else:
            i, ok = o * s - b + taps, True
        index.append(i.clamp(0, n - 1))
        inside = inside & ok & (i >= 0) & (i < n)
    values = real(x[(rest.reshape(-1, *[1] * dims),) + tuple(index)]) * inside.unsqueeze(-1)  # [rows, *k, C]
    order = [1 + WEIGHT_AXES[dims].index(1 + j) for j in range(dims)]  # the weights' axis order of the taps
    values = values.permute(0, *order, dims + 1)
    if w.group == 1:
        return values.reshape(1, len(rows), -1)
    c = x.shape[-1] // w.group
    return values.reshape(len(rows), -1, w.group, c).permute(2, 0, 1, 3).reshape(w.group, len(rows), -1).contiguous()


def geometry(node, x: torch.Tensor, weights: torch.Tensor, dims: int, transposed: bool = False,
             biases: torch.Tensor = None, integer: bool = False) -> Window:
    """Window params checked against each other, the input, the weights and the biases;
    a float layer's input and output must be float tensors (but an `integer` layer's:
    ConvInteger takes and gives integers)."""
    w = window(node, dims, transposed)
    where = f"layer '{node.name}' ({node.type})"
    for key, t in (("layer_bottom_type", node.inputs[0]), ("layer_top_type", node.outputs[0])):
        if not node.quantized and not integer and not t.dtype.is_float:
            raise IRError(f"{where}: {key} of tensor '{t.name}' is {t.dtype.value}; a float convolution takes and "
                          f"gives float tensors")
    if x.dim() != dims + 2:
        raise IRError(f"{where}: input has {x.dim()} axes, expected {dims + 2} (channels last)")
    cin, g = x.shape[-1], w.group
    kernel_in_weights = tuple(weights.shape[1 + i] for i in range(dims)) if weights.dim() == dims + 2 else None
    want_kernel = tuple(w.kernel[WEIGHT_AXES[dims].index(1 + i)] for i in range(dims))
    out_channels = weights.shape[0] * (g if transposed else 1)
    in_channels = weights.shape[-1] * (1 if transposed else g)
    if cin % g or out_channels % g:
        raise IRError(f"{where}: group={g} does not divide the {cin} input channels and the "
                      f"{out_channels} output channels")
    if kernel_in_weights != want_kernel or in_channels != cin:
        layout = "[O/group, " if transposed else "[O, "
        layout += ", ".join(f"k{a}" for a in ("y", "x", "z")[:dims]) + (", C]" if transposed else ", C/group]")
        raise IRError(f"{where}: weights {list(weights.shape)} do not fit kernel {list(w.kernel)}, group {g} and "
                      f"{cin} input channels (expected {layout})")
    num_output = node.get_param("num_output", out_channels)
    if num_output != out_channels:
        raise IRError(f"{where}: num_output={num_output} but the weights give {out_channels} output channels")
    if biases is not None and biases.numel() != out_channels:
        raise IRError(f"{where}: biases have {biases.numel()} values for {out_channels} output channels")
    if transposed and any(p >= max(s, d) for p, s, d in zip(w.output_padding, w.stride, w.dilation)):
        raise IRError(f"{where}: output_padding {list(w.output_padding)} must be smaller than the stride "
                      f"or the dilation of its axis")
    return w


# ---- layouts --------------------------------------------------------------------
def channels_first(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, x.dim() - 1, *range(1, x.dim() - 1))


def channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, *range(2, x.dim()), 1)


def torch_weights(weights: torch.Tensor, dims: int, transposed: bool) -> torch.Tensor:
    """IR weights in torch's layout: [O, C/g, *k] for a convolution, [C, O/g, *k] transposed."""
    last = weights.dim() - 1
    order = (last, 0) if transposed else (0, last)
    return weights.permute(*order, *WEIGHT_AXES[dims])


# ---- float forwards ---------------------------------------------------------------
CONV = {2: F.conv2d, 3: F.conv3d}
CONV_TRANSPOSE = {2: F.conv_transpose2d, 3: F.conv_transpose3d}


def conv_float(x: torch.Tensor, weights: torch.Tensor, biases, w: Window, dims: int, pad_value=0.0) -> torch.Tensor:
    """Direct convolution of a channels-last x (explicit pads of `pad_value`)."""
    if x.dtype == torch.float64 and w.group == x.shape[-1] > 1 and weights.shape[-1] == 1:
        return _depthwise_taps(x, weights, biases, w, pad_value)
    xin = channels_first(x)
    if any(v for v in w.torch_pads):
        xin = F.pad(xin, w.torch_pads, value=pad_value)
    out = CONV[dims](xin, torch_weights(weights, dims, False).to(xin.dtype), biases, w.stride, 0, w.dilation, w.group)
    return channels_last(out)


def _depthwise_taps(x: torch.Tensor, weights: torch.Tensor, biases, w: Window, pad_value) -> torch.Tensor:
    """A depthwise convolution in float64 as a sum over the kernel's taps of the shifted
    input times that tap's weights, channels last: torch's float64 convolution has no
    depthwise kernel of its own and took 5 times as long (EfficientNet-Lite0's float64
    layers: 10 of 16 s a batch of 50). Exact sums stay exact; float sums round in another
    order only (both within float64 steps)."""
    c, o = x.shape[-1], weights.shape[0]
    if o != c:  # a channel multiplier: output channel j reads input channel j // (o / c)
        x = x.repeat_interleave(o // c, dim=-1)
    pads = [v for begin_end in reversed(w.pads + ((0, 0),)) for v in begin_end]  # channels first
    x = F.pad(x, pads, value=pad_value) if any(pads) else x
    taps = weights.to(x.dtype).reshape(o, -1).t()          # [taps, o], in the kernel's order
    spans = [(size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(x.shape[1:-1], w.kernel, w.stride, w.dilation)]
    out = torch.zeros((x.shape[0], *spans, o), dtype=x.dtype, device=x.device)
    windows = [tuple(slice(b, b + (n - 1) * s + 1, s) for b, n, s in zip(offsets, spans, w.stride))
               for offsets in itertools.product(*(range(0, d * k, d) for k, d in zip(w.kernel, w.dilation)))]
    for sample in range(x.shape[0]):  # one sample's output at a time stays in the cache over the taps
        for t, window in enumerate(windows):
            out[sample].addcmul_(x[sample][window], taps[t])
    return out + biases.to(x.dtype) if biases is not None else out


def conv_transpose_float(x: torch.Tensor, weights: torch.Tensor, biases, w: Window, dims: int) -> torch.Tensor:
    """Transposed convolution of a channels-last x: the full result, cropped by the pads."""
    out = CONV_TRANSPOSE[dims](channels_first(x), torch_weights(weights, dims, True).to(x.dtype), biases, w.stride,
                               0, w.output_padding, w.group, w.dilation)
    crop = tuple(slice(b, size - e) for (b, e), size in zip(w.pads, out.shape[2:]))
    return channels_last(out[(slice(None), slice(None)) + crop])


# ---- integer forwards -----------------------------------------------------------------
def exact_bound(node, wi: torch.Tensor, x_absmax: int) -> None:
    """Every partial sum below 2^53, so that float64 convolutions compute exact integers."""
    if qmath.l1_bound(wi, x_absmax) >= qmath.EXACT_FLOAT64:
        raise IRError(f"layer '{node.name}' ({node.type}): the accumulator could pass 2^53")


def conv_quantized(node, dims: int) -> torch.Tensor:
    """acc = sum over each window of (q_w + zp_w) * x', x' the input integers padded with
    -zp_x (the biases hold zp_x * sum(q_w + zp_w)), in float64 (exact), then the output stage."""
    x_t, c = node.inputs[0], node.get_constant("weights")
    w = geometry(node, x_t.betensor, c.betensor, dims)
    wi = QT.integer_weights(c)
    exact_bound(node, wi, QT.int_absmax(x_t))
    acc = conv_float(x_t.betensor.to(torch.float64), wi, None, w, dims, pad_value=-float(x_t.zerop))
    return linear_output(node, acc)


def conv_transpose_quantized(node, dims: int) -> torch.Tensor:
    """acc = conv_transpose(q_x + zp_x, q_w + zp_w), cropped, minus zp_x times each weight
    row's sum over all its taps and input channels (repeated for every group), then
    linear_output adds the biases (+ biases_zp) and runs the output stage."""
    x_t, c = node.inputs[0], node.get_constant("weights")
    w = geometry(node, x_t.betensor, c.betensor, dims, transposed=True)
    wi = QT.integer_weights(c)
    exact_bound(node, wi, QT.shifted_absmax(x_t))
    acc = conv_transpose_float(QT.shifted(x_t), wi, None, w, dims)
    row_sums = wi.reshape(wi.shape[0], -1).sum(dim=1).repeat(w.group)
    return linear_output(node, acc - float(x_t.zerop) * row_sums)


# ---- quantize ---------------------------------------------------------------------
def quantize_transposed(node) -> None:
    """As the tool chain does: the weights [O/group, ...] repeated `group` times along the
    first axis are quantized as a grouped layer of O output channels (one scale per group,
    or per channel), the rescale and the biases (zp_x * row sums of the repeated weights
    folded in) follow from them, then the weights and their scale/zp are cut back to O/group rows."""
    QT.check_quantized_inputs(node)
    c = node.get_constant("weights")
    group = node.get_param("group", 1)
    rows = c.betensor.shape[0]
    if group > 1:
        c.betensor = c.betensor.repeat(group, *([1] * (c.betensor.dim() - 1)))
        c.ir_shape = tuple(c.betensor.shape)
    quantize_linear(node, groups=group)
    if group > 1:
        c.betensor = c.betensor[:rows].contiguous()
        c.ir_shape = tuple(c.betensor.shape)
        if isinstance(c.scale, torch.Tensor):
            c.scale = c.scale[:rows]
        if isinstance(c.zerop, torch.Tensor):
            c.zerop = c.zerop[:rows]
