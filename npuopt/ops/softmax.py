"""Softmax along `axis` (default: the last).

Quantized: d = max_along_axis(q) - q >= 0; e = lut[d] where lut[i] =
round_half_up(exp(-i * 2^k / s_in) * 2^15) (int32, 2^lut_bits entries, k = in_bits -
lut_bits, interpolated when k > 0, negative results set to 0); S = sum of e along the axis;
q_out = round_div(e * Q, S) with Q = 2^bits - 1 the unsigned output's qmax, so the
output scale is Q and zp 0 (softmax values in [0, 1])."""
import torch

from ..quant import tensors as QT
from ..quant import layers as QL  # noqa: F401  (being ported)
from ..quant import qmath
from ..registry import OpType, op_register, quant_register

EXP_ONE = 1 << 15


@op_register(OpType.Softmax, "1.0")
def softmax_forward(self, *args):
    axis = int(self.get_param("axis", -1))
    if self.quantized:
        x_t, out_t = self.inputs[0], self.outputs[0]
        q = x_t.betensor.to(torch.int64)
        d = q.amax(dim=axis, keepdim=True) - q
        e = qmath.lut_lookup(d, self.get_constant("lut").betensor, 0, x_t.dtype.bits).clamp_(min=0)
        total = e.sum(dim=axis, keepdim=True)
        return QL.store_output(self, qmath.round_div(e * out_t.dtype.qmax, total), out_t)
    out = torch.softmax(self.inputs[0].betensor, dim=axis)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Softmax, "1.0")
def softmax_quantize(self, *args):
    raise QT.Unsupported(f"layer '{self.name}' ({self.type}): quantized form not ported to the tool chain's format yet")
    QL.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    st = QL.settings_of(self)
    bits = st.activation_bits
    qmax = (1 << bits) - 1
    QL.set_quantization(out_t, float(qmax), 0, 0, qmax, bits, False, 0.0, 1.0)
    in_bits = x_t.dtype.bits
    lut_bits = qmath.lut_bits_for(in_bits, st.lut_items_in_bits)
    step = 1 << (in_bits - lut_bits)
    i = torch.arange(1 << lut_bits, dtype=torch.float64) * step
    table = torch.floor(torch.exp(-i / float(x_t.scale)) * EXP_ONE + 0.5).to(torch.int64)
    QL.set_lut(self, table, QL.Dtype.INT32)
