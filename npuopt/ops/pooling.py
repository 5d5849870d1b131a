"""Pooling: MAX or AVG over NHWC windows, with asymmetric pads and ceil_mode.

Quantized MAX: the max of the integers (pads never win), quantization passed through.
Quantized AVG: S = sum of (q + zp) over the window (pads add 0), n = the window's
element count (as in float), q_out = round_div(S * M * 2^max(0,-shift),
n * 2^max(0,shift)) - zp_out with M/shift the rescale s_out / s_in."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import layers as QL
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


def avg_pool_divisor(node, x_nchw, w, extra):
    """Per-window element counts: pads count when count_include_pad, the ceil-mode
    overhang never does (PyTorch and the tool chain agree on this)."""
    top, bottom, left, right = w["pads"]
    extra_bottom, extra_right = extra
    h, wd = x_nchw.shape[2], x_nchw.shape[3]
    ones = torch.ones((1, 1, h, wd), dtype=x_nchw.dtype, device=x_nchw.device)
    if node.get_param("count_include_pad", False):
        ones = pad_nchw(ones, w["pads"], 1.0)
        ones = pad_nchw(ones, (0, extra_bottom, 0, extra_right), 0.0)
    else:
        ones = pad_nchw(ones, (top, bottom + extra_bottom, left, right + extra_right), 0.0)
    return F.avg_pool2d(ones, w["kernel"], w["stride"], divisor_override=1)


def pooling_quantized(self):
    x_t, out_t = self.inputs[0], self.outputs[0]
    method = str(self.get_param("method")).upper()
    if method == "MAX":
        x = nhwc_to_nchw(x_t.betensor).to(torch.float32)
    else:
        x = nhwc_to_nchw(QL.shifted_input(x_t)).to(torch.float32)
    w, (extra_bottom, extra_right) = pool_geometry(self, x.shape[2], x.shape[3])
    top, bottom, left, right = w["pads"]
    all_pads = (top, bottom + extra_bottom, left, right + extra_right)
    if method == "MAX":
        out = F.max_pool2d(pad_nchw(x, all_pads, float("-inf")), w["kernel"], w["stride"], 0, w["dilation"])
        return QL.store_output(self, nchw_to_nhwc(out).to(torch.int64), out_t)
    if method != "AVG" or w["dilation"] != (1, 1):
        raise IRError(f"layer '{self.name}': unsupported quantized pooling '{method}' with dilation {w['dilation']}")
    if w["kernel"][0] * w["kernel"][1] * QL.shifted_absmax(x_t) >= qmath.EXACT_FLOAT32:
        x = x.to(torch.float64)
    sums = F.avg_pool2d(pad_nchw(x, all_pads, 0.0), w["kernel"], w["stride"], divisor_override=1)
    counts = avg_pool_divisor(self, x, w, (extra_bottom, extra_right))
    return QL.finish_mean(self, nchw_to_nhwc(sums), nchw_to_nhwc(counts), out_t)


@quant_register(OpType.Pooling, "1.0")
def pooling_quantize(self, *args):
    method = str(self.get_param("method")).upper()
    if method == "MAX":
        QL.pass_through(self)
        return
    QL.quantize_rescaled(self)


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
