"""LRN (local response normalization): x / (bias + alpha * a)^beta, `method`
ACROSS_CHANNELS (default, the parser's ONNX/TF form) or WITHIN_CHANNEL (Caffe), `size`
(required, > 0), `bias` (1.0), `alpha` (1e-4), `beta` (0.75), as the tool chain's float
forward: ACROSS_CHANNELS a = the mean of x^2 over channels c - size//2 .. c + (size-1)//2
(zeros outside, divided by size); WITHIN_CHANNEL (4-D NHWC, odd size) a = the mean of x^2
over the size x size window around each pixel, counting only the pixels inside.

Quantized (ACROSS_CHANNELS, inputs of at most 8 bits; docs/integer-semantics.md "LRN"):
x = q + zp_in, W = the window sum of x^2 (exact), a = R(W, scale_sum_value,
shift_sum_value) into [0, 65535], g = `lut`[a] (16 index bits, interpolated, uint16),
out = R(x * g, scale_value, shift_value); WITHIN_CHANNEL the same with W the sum over the
size x size window (read from the tool chain's IRs). npuopt keeps WITHIN_CHANNEL float:
the tool chain's quantized form divides its window sums by `size`, not by the window's
pixel count, so it does not compute its own float form."""
import torch
import torch.nn.functional as F

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register

METHODS = ("ACROSS_CHANNELS", "WITHIN_CHANNEL")
SUM_BITS = 16           # a = the window's mean square in 16 unsigned bits (the table's index)
TABLE_BITS = 16         # g in 16 unsigned bits
NARROW_BITS = 8         # wider inputs: the tool chain sums the squares in float32 (not exact)


def method_of(node) -> str:
    method = str(node.get_param("method", "ACROSS_CHANNELS")).upper()
    if method not in METHODS:
        raise IRError(f"layer '{node.name}' (LRN): method {method} is not one of {', '.join(METHODS)}")
    return method


def params(node):
    """(size, bias, alpha, beta) checked."""
    size = node.get_param("size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise IRError(f"layer '{node.name}' (LRN): size {size!r} must be a positive integer")
    values = []
    for key, default in (("bias", 1.0), ("alpha", 1e-4), ("beta", 0.75)):
        v = node.get_param(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise IRError(f"layer '{node.name}' (LRN): {key} {v!r} must be a number")
        values.append(float(v))
    return (size, *values)


def check_shape(node, method: str, size: int, ndim: int) -> None:
    if ndim < 2:
        raise IRError(f"layer '{node.name}' (LRN): a {ndim}-D input has no channel axis")
    if method == "WITHIN_CHANNEL" and (ndim != 4 or size % 2 == 0):
        raise IRError(f"layer '{node.name}' (LRN): WITHIN_CHANNEL on a {ndim}-D input or with an even size "
                      f"({size}) is not supported yet")


def channel_window_sum(sq: torch.Tensor, size: int) -> torch.Tensor:
    """sum of sq over channels c - size//2 .. c + (size-1)//2 (last axis), zeros outside."""
    channels = sq.shape[-1]
    padded = F.pad(sq, (size // 2, (size - 1) // 2))
    total = padded[..., 0:channels].clone()
    for i in range(1, size):
        total += padded[..., i:i + channels]
    return total


def spatial_window_sum(sq: torch.Tensor, size: int) -> torch.Tensor:
    """sum of sq (NHWC) over the size x size window around each pixel, zeros outside."""
    p = (size - 1) // 2
    return F.avg_pool2d(sq.permute(0, 3, 1, 2), size, 1, p, divisor_override=1).permute(0, 2, 3, 1)


def lrn_float(x: torch.Tensor, method: str, size: int, bias: float, alpha: float, beta: float) -> torch.Tensor:
    sq = x * x
    if method == "ACROSS_CHANNELS":
        mean = channel_window_sum(sq, size) / size
    else:
        mean = F.avg_pool2d(sq.permute(0, 3, 1, 2), size, 1, (size - 1) // 2, count_include_pad=False)
        mean = mean.permute(0, 2, 3, 1)
    return x / torch.pow(bias + alpha * mean, beta)


@op_register(OpType.LRN, "1.0")
def lrn_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    method = method_of(self)
    size, bias, alpha, beta = params(self)
    check_shape(self, method, size, x_t.betensor.dim())
    if not self.quantized:
        out_t.betensor = lrn_float(computing_float(x_t.betensor), method, size, bias, alpha, beta)
        return out_t.betensor
    x = x_t.betensor.to(torch.int64) + int(x_t.zerop)
    if method == "ACROSS_CHANNELS":
        w = channel_window_sum(x * x, size)
    else:  # read only (the tool chain writes it; npuopt keeps it float): float64 sums, exact
        w = spatial_window_sum((x * x).to(torch.float64), size).to(torch.int64)
    r_sum = Rescale.read(self, suffix="_sum")
    a = qmath.requantize(w, r_sum.multiplier, r_sum.shift, 0, 0, (1 << SUM_BITS) - 1)
    table, dtype = fields.read_lut(self)
    g = qmath.lut_lookup(a.to(torch.int64), table, SUM_BITS, dtype.bits, dtype.is_signed)
    y = Rescale.read(self).apply(x * g, out_t.zerop, out_t.qmin, out_t.qmax)
    return QT.store_output(self, y, out_t)


@quant_register(OpType.LRN, "1.0")
def lrn_quantize(self, *args):
    """The output signed as the input; a's scale s_a puts the largest possible mean
    square at 65535; the table 1 / (bias + alpha * a / s_a)^beta sampled where the
    lookup reads it, at its own 16-bit scale s_g; scale_sum ~ s_a / (s_in^2 * size),
    scale ~ s_out / (s_in * s_g)."""
    method = method_of(self)
    size, bias, alpha, beta = params(self)
    QT.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if method != "ACROSS_CHANNELS" or x_t.qbits > NARROW_BITS:
        raise QT.Unsupported(f"layer '{self.name}' (LRN): {method} on {x_t.qbits}-bit inputs stays float")
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (LRN): unscaled or per-channel input")
    st = settings_of(self)
    QT.quantize_activation(self, out_t, signed=x_t.dtype.is_signed)
    reach = max(abs(x_t.qmin + int(x_t.zerop)), abs(x_t.qmax + int(x_t.zerop))) / float(x_t.scale)
    s_a = qmath.linear_quant_params(0.0, reach * reach, SUM_BITS, True, True, False)[0]
    k = min(x_t.qbits, st.lut_items_in_bits)
    a = torch.arange(1 << k, dtype=torch.float64) * (1 << (SUM_BITS - k)) / s_a
    g = 1.0 / torch.pow(bias + alpha * a, beta)
    s_g = qmath.linear_quant_params(0.0, float(g.abs().max()), TABLE_BITS, True, True, False)[0]
    fields.write_lut(self, qmath.quantize(g, s_g, 0, 0, (1 << TABLE_BITS) - 1), Dtype.UINT16)
    Rescale.from_ratio(s_a / (float(x_t.scale) ** 2 * size), st.multiplier_bits).write(self, suffix="_sum")
    Rescale.from_ratio(out_t.scale / float(x_t.scale) / s_g, st.multiplier_bits).write(self)
