"""Pooling over NHWC windows: MAX, AVG, L1, L2, with dilation, asymmetric pads and
ceil_mode (PyTorch's rule: the last window starts inside the input or its leading pad;
the overhang of the last windows past the bottom/right pad is padding too).

Float (as the tool chain): MAX over the window (pads never win); AVG = S / n with S the
window's sum (pads add 0) and n = kernel_y * kernel_x when count_include_pad (the
default; the ceil-mode overhang counted too), else the window's taps inside the input
(at least 1); L1 = sum |x|, L2 = sqrt(sum x^2), pads adding 0, count_include_pad unused.

Quantized, A = q + zp_in (pads hold A = 0), R(X, M, s) = clamp(round_half_even(X * M *
2^-s) - zp_out):
* MAX: the max of q, the pads holding the input's qmin; quantization passed through;
* AVG: S = sum A clamped to [-2^31, 2^31], n as above, R(S, M, s) with the multiplier and
  shift of fl32(fl32(s_out / s_in) / n) per window (8-bit multipliers, derived from the
  float32 scales in the IR: the IR stores none);
* L1: S = sum |A| clamped to [0, 2^32 - 1], R(S, M, s), M/s = scale_value/shift_value;
* L2: S = sum A^2 clamped likewise, P = clamp(round_half_even(S * M * 2^-s), 0, 65535),
  then `sqrt_lut` looked up at P (qmath.lut_lookup, 16 index bits).
L1/L2 outputs are unsigned; their 15-bit rescales and the sqrt table are those of Reduce
L1/L2 (reduce.py), the sums bounded below 2^32."""
import math

import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw, param_choice, pooled_size, window_params
from ._movement import bool_param
from .reduce import SUM_LIMIT, quantize_l2_lut, wide_rescale

METHODS = ["MAX", "AVG", "L1", "L2"]
SUM_BOUND = 1 << 31           # AVG sums are clamped to [-2^31, 2^31]
AVG_MULTIPLIER_BITS = 8
INDEX_MAX = (1 << 16) - 1     # L2: the 16-bit index of sqrt_lut


def checked_window(node):
    """window_params, every value checked: positive kernel/stride/dilation, non-negative pads."""
    w = window_params(node)
    names = {"kernel": ("kernel_y", "kernel_x"), "stride": ("stride_y", "stride_x"),
             "dilation": ("dilation_y", "dilation_x"), "pads": ("pad_top", "pad_bottom", "pad_left", "pad_right")}
    for key, keys in names.items():
        for name, v in zip(keys, w[key]):
            low = 0 if key == "pads" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                kind = "a non-negative" if low == 0 else "a positive"
                raise IRError(f"layer '{node.name}' ({node.type}): {name} must be {kind} integer, got {v!r}")
    return w


def geometry(node, height: int, width: int):
    """(window params, all pads (top, bottom, left, right) with the ceil-mode overhang,
    output height and width)."""
    w = checked_window(node)
    ceil_mode = bool_param(node, "ceil_mode", False)
    top, bottom, left, right = w["pads"]
    (kh, kw), (sh, sw), (dh, dw) = w["kernel"], w["stride"], w["dilation"]
    out_h = pooled_size(height, kh, sh, dh, top, bottom, ceil_mode)
    out_w = pooled_size(width, kw, sw, dw, left, right, ceil_mode)
    if out_h < 1 or out_w < 1:
        raise IRError(f"layer '{node.name}' ({node.type}): a {kh}x{kw} window (dilation {dh}x{dw}) does not "
                      f"fit the padded {height}x{width} input")
    extra_h = max(0, (out_h - 1) * sh + dh * (kh - 1) + 1 - (height + top + bottom))
    extra_w = max(0, (out_w - 1) * sw + dw * (kw - 1) + 1 - (width + left + right))
    return w, (top, bottom + extra_h, left, right + extra_w), out_h, out_w


def window_sums(x: torch.Tensor, w, pads, out_h: int, out_w: int) -> torch.Tensor:
    """Sum over every window of NCHW x (pads add 0), exact for integers below 2^53 in float64."""
    n, c = x.shape[:2]
    padded = pad_nchw(x, pads, 0.0)
    cols = F.unfold(padded, w["kernel"], dilation=w["dilation"], stride=w["stride"])
    full_h = (padded.shape[2] - w["dilation"][0] * (w["kernel"][0] - 1) - 1) // w["stride"][0] + 1
    return cols.reshape(n, c, -1, cols.shape[-1]).sum(dim=2).reshape(n, c, full_h, -1)[:, :, :out_h, :out_w]


def window_max(x: torch.Tensor, w, pads, fill: float, out_h: int, out_w: int) -> torch.Tensor:
    out = F.max_pool2d(pad_nchw(x, pads, fill), w["kernel"], w["stride"], 0, w["dilation"])
    return out[:, :, :out_h, :out_w]


def avg_divisors(node, height: int, width: int, w, pads, out_h: int, out_w: int) -> torch.Tensor:
    """[OH, OW] n of the AVG description (float64)."""
    kh, kw = w["kernel"]
    if bool_param(node, "count_include_pad", True):
        return torch.full((out_h, out_w), float(kh * kw), dtype=torch.float64)
    inside = torch.ones((1, 1, height, width), dtype=torch.float64)
    return window_sums(inside, w, pads, out_h, out_w)[0, 0]


def pooling_float(node, x: torch.Tensor, method: str) -> torch.Tensor:
    w, pads, oh, ow = geometry(node, x.shape[2], x.shape[3])
    if method == "MAX":
        return window_max(x, w, pads, float("-inf"), oh, ow)
    x64 = x.to(torch.float64)
    if method == "AVG":
        counts = avg_divisors(node, x.shape[2], x.shape[3], w, pads, oh, ow).clamp(min=1.0)
        return (window_sums(x64, w, pads, oh, ow) / counts).to(torch.float32)
    if method == "L1":
        return window_sums(x64.abs(), w, pads, oh, ow).to(torch.float32)
    return torch.sqrt(window_sums(x64 * x64, w, pads, oh, ow)).to(torch.float32)


def pooling_quantized(node, method: str) -> torch.Tensor:
    x_t, out_t = node.inputs[0], node.outputs[0]
    x = nhwc_to_nchw(x_t.betensor)
    w, pads, oh, ow = geometry(node, x.shape[2], x.shape[3])
    zp, lo, hi = out_t.zerop, out_t.qmin, out_t.qmax
    if method == "MAX":
        return window_max(x.to(torch.float32), w, pads, float(x_t.qmin), oh, ow)
    a = nhwc_to_nchw(QT.shifted(x_t))
    if method == "AVG":
        sums = window_sums(a, w, pads, oh, ow).clamp_(-SUM_BOUND, SUM_BOUND)
        counts = avg_divisors(node, x.shape[2], x.shape[3], w, pads, oh, ow)
        if w["dilation"] == (1, 1) and float(counts.min()) < 1:
            raise IRError(f"layer '{node.name}' (Pooling): an AVG window lies entirely in the padding "
                          f"(count_include_pad=false)")
        ratio = (torch.tensor(out_t.scale, dtype=torch.float32) / torch.tensor(x_t.scale, dtype=torch.float32)
                 / counts.clamp(min=1.0).to(torch.float32))
        m, s = qmath.scale_approximation(ratio, AVG_MULTIPLIER_BITS)
        return qmath.requantize(sums, m, s, zp, lo, hi)
    rescale = Rescale.read(node)
    sums = window_sums(a.abs() if method == "L1" else a * a, w, pads, oh, ow).clamp_(0, SUM_LIMIT)
    if method == "L1":
        return rescale.apply(sums, zp, lo, hi)
    index = rescale.apply(sums, 0, 0, INDEX_MAX)
    table, dtype = fields.read_lut(node, "sqrt_lut")
    return qmath.lut_lookup(index, table, 16, dtype.bits, dtype.is_signed)


@op_register(OpType.Pooling, "1.0")
def pooling_forward(self, *args):
    method = param_choice(self, "method", METHODS)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if x_t.betensor.dim() != 4:
        raise IRError(f"layer '{self.name}' (Pooling): takes an NHWC input, got {x_t.betensor.dim()}-D")
    if self.quantized:
        return QT.store_output(self, nchw_to_nhwc(pooling_quantized(self, method)), out_t)
    out_t.betensor = nchw_to_nhwc(pooling_float(self, nhwc_to_nchw(x_t.betensor), method))
    return out_t.betensor


def check_sum_bound(node, bound: int) -> None:
    """L1/L2 sums saturate at 2^32 - 1: inputs whose sums could reach it stay in float."""
    if bound > SUM_LIMIT:
        raise QT.Unsupported(f"layer '{node.name}' (Pooling): the window sum can reach {bound}, past the "
                             f"tool chain's uint32 accumulator")


@quant_register(OpType.Pooling, "1.0")
def pooling_quantize(self, *args):
    method = param_choice(self, "method", METHODS)
    checked_window(self)
    if method == "MAX":
        QT.pass_through(self)
        return
    QT.check_quantized_inputs(self)
    x, out = self.inputs[0], self.outputs[0]
    if method == "AVG":
        QT.quantize_activation(self, out)
        return
    if x.qinvariant or x.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (Pooling): {method} of an unscaled or per-channel input")
    taps = math.prod(window_params(self)["kernel"])
    QT.quantize_activation(self, out, signed=False)
    s_in, s_out = float(x.scale), float(out.scale)
    if method == "L1":
        check_sum_bound(self, taps * QT.shifted_absmax(x))
        wide_rescale(s_out / s_in).write(self)
        return
    check_sum_bound(self, taps * QT.shifted_absmax(x) ** 2)
    top = (out.qmax + out.zerop) / s_out   # P, the 16-bit sum of squares, spans the squared output range
    s_p = INDEX_MAX / max(top * top, qmath.FLOAT32_EPS)
    wide_rescale(s_p / (s_in * s_in)).write(self)
    quantize_l2_lut(self, x, out, s_p)
