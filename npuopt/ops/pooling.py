"""Pooling: MAX or AVG over NHWC windows, with asymmetric pads and ceil_mode.

Quantized MAX: the max of the integers (pads never win), quantization passed through.
Quantized AVG (the tool chain's form): S = sum of (q + zp) over the window (pads
add 0), n = the window's element count (with pads when count_include_pad, never
the ceil-mode overhang); the multiplier and shift of the ratio s_out / s_in / n
(8-bit multipliers, from the float32 scales in the IR, per window), then
q_out = round_half_even(S * M * 2^-shift) - zp_out, saturated. The IR stores no
multiplier for AVG pooling: it is derived from layer_top_scale."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw, pooled_size, window_params


def pool_geometry(node, height, width):
    """Window params plus the extra bottom/right padding that ceil_mode needs."""
    w = window_params(node)
    ceil_mode = bool(node.get_param("ceil_mode", False))
    top, bottom, left, right = w["pads"]
    out_h = pooled_size(height, w["kernel"][0], w["stride"][0], w["dilation"][0], top, bottom, ceil_mode)
    out_w = pooled_size(width, w["kernel"][1], w["stride"][1], w["dilation"][1], left, right, ceil_mode)
    need_h = (out_h - 1) * w["stride"][0] + w["dilation"][0] * (w["kernel"][0] - 1) + 1
    need_w = (out_w - 1) * w["stride"][1] + w["dilation"][1] * (w["kernel"][1] - 1) + 1
    extra_bottom = max(0, need_h - (height + top + bottom))
    extra_right = max(0, need_w - (width + left + right))
    return w, (extra_bottom, extra_right)


def count_include_pad(node) -> bool:
    return bool(node.get_param("count_include_pad", True))


def quantized_avg_counts(node, height: int, width: int, out_h: int, out_w: int, w) -> torch.Tensor:
    """The element count the tool chain divides each window's sum by: kernel_h * kernel_w
    with count_include_pad, else the window clipped to the unpadded input."""
    kh, kw = w["kernel"]
    if count_include_pad(node):
        return torch.full((out_h, out_w), kh * kw, dtype=torch.int64)
    sh, sw = w["stride"]
    top, _, left, _ = w["pads"]
    h0 = torch.arange(out_h).reshape(-1, 1) * sh - top
    w0 = torch.arange(out_w).reshape(1, -1) * sw - left
    rows = (h0 + kh).clamp(max=height) - h0.clamp(min=0)
    cols = (w0 + kw).clamp(max=width) - w0.clamp(min=0)
    return rows * cols


def avg_pool_divisor(node, x_nchw, w, extra):
    """Per-window element counts: pads count when count_include_pad, the ceil-mode
    overhang never does (PyTorch's rule, for the float forward)."""
    top, bottom, left, right = w["pads"]
    extra_bottom, extra_right = extra
    h, wd = x_nchw.shape[2], x_nchw.shape[3]
    ones = torch.ones((1, 1, h, wd), dtype=x_nchw.dtype, device=x_nchw.device)
    if count_include_pad(node):
        ones = pad_nchw(ones, w["pads"], 1.0)
        ones = pad_nchw(ones, (0, extra_bottom, 0, extra_right), 0.0)
    else:
        ones = pad_nchw(ones, (top, bottom + extra_bottom, left, right + extra_right), 0.0)
    return F.avg_pool2d(ones, w["kernel"], w["stride"], divisor_override=1)


AVG_MULTIPLIER_BITS = 8


def avg_rescale(node, counts: torch.Tensor):
    """Per-window multiplier/shift of s_out / s_in / n, as the tool chain derives them."""
    ratio = (torch.tensor(node.outputs[0].scale, dtype=torch.float32)
             / torch.tensor(node.inputs[0].scale, dtype=torch.float32) / counts.to(torch.float32))
    return qmath.scale_approximation(ratio, AVG_MULTIPLIER_BITS)


def pooling_quantized(self):
    x_t, out_t = self.inputs[0], self.outputs[0]
    method = str(self.get_param("method")).upper()
    if method == "MAX":
        x = nhwc_to_nchw(x_t.betensor).to(torch.float32)
    else:
        x = nhwc_to_nchw(QT.shifted(x_t))
    w, (extra_bottom, extra_right) = pool_geometry(self, x.shape[2], x.shape[3])
    top, bottom, left, right = w["pads"]
    all_pads = (top, bottom + extra_bottom, left, right + extra_right)
    if method == "MAX":
        out = F.max_pool2d(pad_nchw(x, all_pads, float(x_t.qmin)), w["kernel"], w["stride"], 0, w["dilation"])
        return QT.store_output(self, nchw_to_nhwc(out), out_t)
    if method != "AVG" or w["dilation"] != (1, 1):
        raise QT.Unsupported(f"layer '{self.name}': quantized pooling '{method}' with dilation "
                             f"{w['dilation']} is not supported")
    sums = F.avg_pool2d(pad_nchw(x, all_pads, 0.0), w["kernel"], w["stride"], divisor_override=1)
    counts = quantized_avg_counts(self, x.shape[2], x.shape[3], sums.shape[2], sums.shape[3], w)
    m, shift = avg_rescale(self, counts.to(sums.device))
    y = qmath.requantize(sums, m, shift, out_t.zerop, out_t.qmin, out_t.qmax)
    return QT.store_output(self, nchw_to_nhwc(y), out_t)


@quant_register(OpType.Pooling, "1.0")
def pooling_quantize(self, *args):
    method = str(self.get_param("method")).upper()
    if method == "MAX":
        QT.pass_through(self)
        return
    if method != "AVG":
        raise QT.Unsupported(f"layer '{self.name}': quantized pooling '{method}' is not supported yet")
    QT.check_quantized_inputs(self)
    QT.quantize_activation(self, self.outputs[0])


@op_register(OpType.Pooling, "1.0")
def pooling_forward(self, *args):
    if self.quantized:
        return pooling_quantized(self)
    x = nhwc_to_nchw(self.inputs[0].betensor)
    w, (extra_bottom, extra_right) = pool_geometry(self, x.shape[2], x.shape[3])
    top, bottom, left, right = w["pads"]
    all_pads = (top, bottom + extra_bottom, left, right + extra_right)
    method = str(self.get_param("method")).upper()
    if method == "MAX":
        padded = pad_nchw(x, all_pads, float("-inf"))
        out = F.max_pool2d(padded, w["kernel"], w["stride"], 0, w["dilation"])
    elif method == "AVG":
        if w["dilation"] != (1, 1):
            raise IRError(f"layer '{self.name}': AVG pooling with dilation {w['dilation']} is not supported")
        padded = pad_nchw(x, all_pads, 0.0)
        sums = F.avg_pool2d(padded, w["kernel"], w["stride"], divisor_override=1)
        out = sums / avg_pool_divisor(self, x, w, (extra_bottom, extra_right))
    else:
        raise IRError(f"layer '{self.name}': unsupported pooling method '{method}' (MAX, AVG)")
    out = nchw_to_nhwc(out)
    self.outputs[0].betensor = out
    return out
