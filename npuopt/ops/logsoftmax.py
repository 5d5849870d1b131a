"""LogSoftmax along `axis` (default: the last); float: torch's log_softmax in float32.

Quantized, the tool chain's integer form (docs/integer-semantics.md "LogSoftmax"):
softmax from the exp table `lut_exp` (uint32) into p in [0, P], P = qmax_out - qmin_out,
at the rescale scale_value/shift_value (~ P: p = softmax * P), then out = `lut_log`[p]
(the output dtype, b index bits). b: the input's bits, d = q - max_axis(q),
y = lut_exp[d + 2^b - 1], S = sum y along the axis. If the axis is shorter than 8 and
the rows are a multiple of 128: z = trunc(((y << 11) + (S >> 1)) / max(S, 1)),
p = R(z, M, s + 11) into [0, P]; otherwise Softmax's divide-once form (c = 30 when the
largest entry is 1, else 31). OPT's default target (X2) writes a float32 `lut_exp` and
`quantize_scale` instead (float_table_form): npuopt reads it, and writes the integer form."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import softmax

SMALL_AXIS_SHIFT = 11


def log_softmax_integers(node, q: torch.Tensor, axis: int, x_t, out_t) -> torch.Tensor:
    if node.get_constant("lut_exp").dtype.is_float:
        return float_table_form(node, q, axis, x_t, out_t)
    table, dtype = fields.read_lut(node, "lut_exp")
    b = x_t.qbits
    index = q - q.amax(dim=axis, keepdim=True) + ((1 << b) - 1)
    y = qmath.lut_lookup(index, table, b, dtype.bits, dtype.is_signed)
    total = y.sum(dim=axis, keepdim=True)
    denominator = total.clamp(min=1)
    r = Rescale.read(node)
    span = out_t.qmax - out_t.qmin
    rows = q.numel() / q.shape[axis]
    if q.shape[axis] < softmax.SMALL_AXIS and rows % softmax.SMALL_ROWS_MULTIPLE == 0:
        z = torch.div((y << SMALL_AXIS_SHIFT) + (total >> 1), denominator, rounding_mode="trunc")
        p = qmath.requantize(z, r.multiplier, r.shift + SMALL_AXIS_SHIFT, 0, 0, span)
    else:
        c = softmax.SUM_BITS - 1 if int(table.max()) == 1 else softmax.SUM_BITS
        p = softmax.reciprocal_rescale(y, denominator, c, r.multiplier, r.shift, 0, 0, span)
    log_table, log_dtype = fields.read_lut(node, "lut_log")
    return qmath.lut_lookup(p.to(torch.int64), log_table, b, log_dtype.bits, log_dtype.is_signed)


def float_lookup(index: torch.Tensor, table: torch.Tensor, index_bits: int) -> torch.Tensor:
    """The tool chain's float table lookup: t[i] + (t[i+1] - t[i]) * r / 2^c in float32,
    i = index >> c, r = index - (i << c), c = index_bits - log2(entries) (0: no
    interpolation); the entry past the end repeats the last."""
    c = max(0, index_bits - (table.numel().bit_length() - 1))
    t = torch.cat([table, table[-1:]]).to(torch.float32)
    i = index >> c
    step = (t[i + 1] - t[i]) * (index - (i << c))
    return t[i] + step / (1 << c)


def float_table_form(node, q: torch.Tensor, axis: int, x_t, out_t) -> torch.Tensor:
    """The tool chain's X2 form (float32 `lut_exp`, params `quantize_scale` = [c0, c1]):
    out = clamp(round(fl32(d) * c0 - log(sum y) * c1) - zp_out), y = exp table at
    d + 2^b - 1 (float lookup), the sum and logarithm in float32 (torch's order)."""
    c = node.get_param("quantize_scale", None)
    if not isinstance(c, list) or len(c) != 2 or not all(isinstance(v, (int, float)) for v in c):
        raise IRError(f"layer '{node.name}' (LogSoftmax): a float32 lut_exp needs quantize_scale = [c0, c1], "
                      f"got {c!r}")
    d = q - q.amax(dim=axis, keepdim=True)
    y = float_lookup(d + ((1 << x_t.qbits) - 1), node.get_constant("lut_exp").betensor, x_t.qbits)
    log_sum = torch.log(y.sum(dim=axis, keepdim=True).to(torch.float32))
    v = d.to(torch.float32) * float(c[0]) - log_sum * float(c[1])
    return (torch.round(v).to(torch.int64) - int(out_t.zerop)).clamp(out_t.qmin, out_t.qmax)


@op_register(OpType.LogSoftmax, "1.0")
def logsoftmax_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    axis = softmax.softmax_axis(self, x_t.betensor.dim())
    if not self.quantized:
        out_t.betensor = torch.log_softmax(computing_float(x_t.betensor), dim=axis)
        return out_t.betensor
    return QT.store_output(self, log_softmax_integers(self, x_t.betensor.to(torch.int64), axis, x_t, out_t), out_t)


@quant_register(OpType.LogSoftmax, "1.0")
def logsoftmax_quantize(self, *args):
    """Softmax's exp table (uint32); p = softmax * P with P the output's span (the log
    table's index then reads p / P directly); the output signed from its calibrated
    range; lut_log entry i = log(i * 2^(b-k) / P) (the last log 1 = 0, entry 0 = entry 1)."""
    QT.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (LogSoftmax): unscaled or per-channel input")
    st = settings_of(self)
    if x_t.qbits != st.activation_bits:
        raise QT.Unsupported(f"layer '{self.name}' (LogSoftmax): input bits {x_t.qbits} differ from the "
                             f"output's {st.activation_bits} (the log table is indexed with the input's)")
    axis_length = int(x_t.ir_shape[softmax.softmax_axis(self, len(x_t.ir_shape))])
    b = x_t.qbits
    k = min(b, st.lut_items_in_bits)
    fields.write_lut(self, softmax.exp_table(x_t, k, softmax.exp_table_bits(axis_length)), Dtype.UINT32, "lut_exp")
    QT.quantize_activation(self, out_t, signed=True)
    span = out_t.qmax - out_t.qmin
    Rescale.from_ratio(float(span), st.multiplier_bits).write(self)
    p = torch.arange(1 << k, dtype=torch.float64) * (1 << (b - k)) / span
    p[-1] = 1.0
    p[0] = p[1]
    lut = qmath.quantize(torch.log(p), out_t.scale, out_t.zerop, out_t.qmin, out_t.qmax)
    fields.write_lut(self, lut, out_t.dtype, "lut_log")
