"""Pooling3D: MAX and AVG pooling over NDHWC windows, with the params the parser writes
for 3-D (kernel/stride/dilation_z/y/x, pad_z/y/x_begin/end), ceil_mode (PyTorch's rule,
the overhang of the last windows being padding too) and count_include_pad (default true,
as the tool chain reads an IR without it). The tool chain has no L1/L2 3-D pooling.

Float: MAX over the window (pads never win); AVG = S / n, S the window's sum (pads add
0), n = kernel_z * kernel_y * kernel_x with count_include_pad (the ceil-mode overhang
counted too), else the window's taps inside the input (at least 1).

Quantized, the quantization passed through: MAX = the max of q (pads hold qmin). AVG
sums A = q + zp_in with count_include_pad (then zp = zp_out), else A = q (zp = 0),
pads holding A = 0; S = the window's sum, n as above. The tool chain divides in two
ways, both reproduced step by step:
* dilated windows: S clamped to [-2^31, 2^31], out = clamp(round_half_even(S * M *
  2^-s) - zp, qmin, qmax) with M, s the 8-bit approximation of fl32(1 / n);
* otherwise, in float32 (fl32 = one float32 rounding): S = fl32(S) clamped to
  [-2^31, 2^31]; without count_include_pad S = fl32(fl32(S * K) / fl32(fl32(c / K) * K)),
  K = kernel_z * kernel_y * kernel_x, c the taps inside the input (c = 0 is an error);
  T = clamp(round_half_even(fl32(S * M1) * 2^-s1), -2^31, 2^31) with M1, s1 of 1 /
  (kernel_y * kernel_x), then out = clamp(round_half_even(fl32(T * M2) * 2^-s2) - zp,
  qmin, qmax) with M2, s2 of 1 / kernel_z."""
import math

import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._conv import channels_first, channels_last, window
from ._layout import param_choice, pooled_size
from ._movement import bool_param

METHODS = ["MAX", "AVG"]
SUM_BOUND = 1 << 31            # AVG sums are clamped to [-2^31, 2^31]
AVG_MULTIPLIER_BITS = 8


def geometry(node, x: torch.Tensor):
    """(checked window, (begin, end) pads per axis with the ceil-mode overhang added to the
    end, output (depth, height, width))."""
    where = f"layer '{node.name}' ({node.type})"
    if x.dim() != 5:
        raise IRError(f"{where}: takes an NDHWC input, got {x.dim()}-D")
    w = window(node, 3)
    ceil_mode = bool_param(node, "ceil_mode", False)
    pads, out = [], []
    for axis, size, k, s, d, (begin, end) in zip("zyx", x.shape[1:4], w.kernel, w.stride, w.dilation, w.pads):
        o = pooled_size(size, k, s, d, begin, end, ceil_mode)
        if o < 1:
            raise IRError(f"{where}: kernel_{axis}={k} (dilation {d}) does not fit the padded input "
                          f"({begin} + {size} + {end})")
        pads.append((begin, end + max(0, (o - 1) * s + d * (k - 1) + 1 - (size + begin + end))))
        out.append(o)
    return w, tuple(pads), tuple(out)


def windows(x: torch.Tensor, w, pads, out, fill: float) -> torch.Tensor:
    """[N, C, OD, OH, OW, taps]: every window's taps of NCDHW x, pads holding `fill`."""
    v = F.pad(x, tuple(p for begin_end in reversed(pads) for p in begin_end), value=fill)
    for axis, (k, s, d) in enumerate(zip(w.kernel, w.stride, w.dilation)):
        v = v.unfold(2 + axis, d * (k - 1) + 1, s)
    dz, dy, dx = w.dilation
    v = v[:, :, :out[0], :out[1], :out[2], ::dz, ::dy, ::dx]
    return v.reshape(*v.shape[:5], -1)


def inside_counts(x: torch.Tensor, w, pads, out) -> torch.Tensor:
    """[OD, OH, OW] taps of each window inside the input (float64)."""
    ones = torch.ones((1, 1) + tuple(x.shape[1:4]), dtype=torch.float64)
    return windows(ones, w, pads, out, 0.0).sum(-1)[0, 0]


def pooling3d_float(node, x: torch.Tensor, method: str) -> torch.Tensor:
    w, pads, out = geometry(node, x)
    xc = channels_first(x)
    if method == "MAX":
        return channels_last(windows(xc, w, pads, out, float("-inf")).amax(-1))
    sums = windows(xc.to(torch.float64), w, pads, out, 0.0).sum(-1)
    if bool_param(node, "count_include_pad", True):
        n = float(math.prod(w.kernel))
    else:
        n = inside_counts(x, w, pads, out).clamp(min=1.0)
    return channels_last(sums / n).to(torch.float32)


def stage_f32(v: torch.Tensor, area: int) -> torch.Tensor:
    """round_half_even(fl32(v * M) * 2^-s), M, s of fl32(1 / area): one float32 division step."""
    m, s = qmath.scale_approximation(torch.tensor(1.0) / area, AVG_MULTIPLIER_BITS)
    return torch.round(v * float(m) * math.ldexp(1.0, -s))


def avg_quantized(node, x_t, out_t, w, pads, out) -> torch.Tensor:
    include_pad = bool_param(node, "count_include_pad", True)
    a = QT.shifted(x_t) if include_pad else x_t.betensor.to(torch.float64)
    zp = out_t.zerop if include_pad else 0
    sums = windows(channels_first(a), w, pads, out, 0.0).sum(-1)
    kernel = math.prod(w.kernel)
    counts = None if include_pad else inside_counts(x_t.betensor, w, pads, out)
    if any(d > 1 for d in w.dilation):
        sums.clamp_(-SUM_BOUND, SUM_BOUND)
        ratio = 1.0 / kernel if include_pad else \
            torch.tensor(1.0) / counts.clamp(min=1.0).to(torch.float32)
        m, s = qmath.scale_approximation(ratio, AVG_MULTIPLIER_BITS)
        return qmath.requantize(sums, m, s, zp, out_t.qmin, out_t.qmax)
    v = sums.to(torch.float32).clamp_(-SUM_BOUND, SUM_BOUND)
    if counts is not None:
        if float(counts.min()) < 1:
            raise IRError(f"layer '{node.name}' (Pooling3D): an AVG window lies entirely in the padding "
                          f"(count_include_pad=false)")
        share = counts.to(torch.float32) / float(kernel)
        v = v * float(kernel) / (share * float(kernel))
    v = stage_f32(v, w.kernel[1] * w.kernel[2]).clamp_(-SUM_BOUND, SUM_BOUND)
    v = stage_f32(v, w.kernel[0]).to(torch.float64)
    return v.sub_(float(zp)).clamp_(out_t.qmin, out_t.qmax)


@op_register(OpType.Pooling3D, "1.0")
def pooling3d_forward(self, *args):
    method = param_choice(self, "method", METHODS)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if not self.quantized:
        out_t.betensor = pooling3d_float(self, x_t.betensor, method)
        return out_t.betensor
    w, pads, out = geometry(self, x_t.betensor)
    if method == "MAX":
        q = channels_first(x_t.betensor.to(torch.float64))
        y = windows(q, w, pads, out, float(x_t.qmin)).amax(-1)
    else:
        y = avg_quantized(self, x_t, out_t, w, pads, out)
    return QT.store_output(self, channels_last(y), out_t)


@quant_register(OpType.Pooling3D, "1.0")
def pooling3d_quantize(self, *args):
    param_choice(self, "method", METHODS)
    window(self, 3)
    QT.pass_through(self)
