"""Pow: base (input 0) to the power of exponent (input 1), NumPy broadcasting, in float32
as the tool chain's float forward (torch.pow).

Quantized, in the tool chain's form (through logarithms): with E = q_e + zp_e,
L = lut_log[q_b - qmin_b] (int16 table of ln|x|; qmin_b of the full range of the base's
bits), P = requantize(L * E, `scale_value`, `shift_value`) into int16 with zero point 0,
X = lut_exp[P + 32768] (table of e^p in the top's type), out = X * sign(q_b + zp_b)^E.
The sign step takes E itself as the exponent, right only for an integer exponent
(qinvariant, scale 1) or a base that is never negative: npuopt keeps any other Pow
in float (the tool chain warns and computes it anyway).

npuopt chooses: the top symmetric (zp 0, signed iff the base is), from its calibrated
range; ln|x| in int16 over every nonzero code of the base; L * E at the int16 scale that
spans [ln(1 / (2 s_out)), ln(top's largest value)] symmetrically (anything below rounds to
code 0 anyway), with M * 2^-s ~ s_P / (s_e * s_L); both tables as Activation's (one entry
per code at 8 bits, fitted at 16), of 2^min(base bits, lut_items_in_bits) entries."""
import math
from types import SimpleNamespace

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs, float_operands
from ._unary import _indexed_from
from .activation import build_lut

INNER = Dtype.INT16  # the type of ln|x| and of L * E


def full_qmin(t) -> int:
    return qmath.integer_range(t.qbits, t.dtype.is_signed)[0]


def _int16(scale: float):
    """An int16 intermediate of zero point 0, as build_lut reads a tensor."""
    return SimpleNamespace(scale=scale, zerop=0, qbits=16, qmin=INNER.qmin, qmax=INNER.qmax, dtype=INNER)


def sign_power(sign: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """sign^e for sign in {-1, 0, 1} and integers e, as float64 (0^-n is inf)."""
    odd = torch.remainder(e, 2) != 0
    y = torch.where((sign < 0) & odd, -1.0, 1.0).to(torch.float64)
    zero = torch.where(e > 0, 0.0, torch.where(e == 0, 1.0, math.inf)).to(torch.float64)
    return torch.where(sign == 0, zero, y)


@op_register(OpType.Pow, "1.0")
def pow_forward(self, *args):
    check_inputs(self, (2,))
    out = self.outputs[0]
    if not self.quantized:
        base, exponent = float_operands(self)
        out.betensor = torch.pow(base, exponent)
        return out.betensor
    b, e = self.inputs
    log_table, log_type = fields.read_lut(self, "lut_log")
    exp_table, exp_type = fields.read_lut(self, "lut_exp")
    r = Rescale.read(self)
    if r.per_channel:
        raise IRError(f"layer '{self.name}' (Pow): a per-channel rescale is not supported")
    big_e = QT.shifted(e, torch.int64)
    logs = qmath.lut_lookup(b.betensor.to(torch.int64) - full_qmin(b), log_table, b.qbits, log_type.bits,
                            log_type.is_signed)
    p = qmath.requantize(logs * big_e, r.multiplier, r.shift, 0, INNER.qmin, INNER.qmax)
    x = qmath.lut_lookup(p.to(torch.int64) - INNER.qmin, exp_table, 16, exp_type.bits, exp_type.is_signed)
    y = x.to(torch.float64) * sign_power(torch.sign(QT.shifted(b)), big_e)
    return QT.store_output(self, y.clamp(out.qmin, out.qmax), out)


@quant_register(OpType.Pow, "1.0")
def pow_quantize(self, *args):
    check_inputs(self, (2,))
    QT.check_quantized_inputs(self)
    b, e = self.inputs
    out = self.outputs[0]
    signed = b.dtype.is_signed
    if signed and not e.is_qinvariant():
        raise QT.Unsupported(f"layer '{self.name}' (Pow): a signed base with a non-integer (quantized) exponent; "
                             f"the tool chain's sign step needs an integer exponent, npuopt keeps it in float")
    st = settings_of(self)
    method = st.quantize_method_for_activation
    lo, hi = QT.activation_range(self, out, True)
    scale, zp, qmin, qmax = qmath.linear_quant_params(min(lo, 0.0), max(hi, 0.0), st.activation_bits, True,
                                                      method.full_range, signed)
    QT.set_quantization(out, scale, zp, qmin, qmax, st.activation_bits, signed)

    codes = torch.arange(b.qmin, b.qmax + 1, dtype=torch.float64)
    magnitudes = ((codes + float(b.zerop)) / float(b.scale)).abs()
    magnitudes = magnitudes[magnitudes > 0]
    log_reach = float(magnitudes.log().abs().max()) if magnitudes.numel() else 1.0
    top = max(abs(lo), abs(hi))
    p_reach = max(abs(math.log(0.5 / out.scale)), abs(math.log(top)) if top > 0 else 0.0)
    log_t, p_t = (_int16(qmath.linear_quant_params(-v, v, 16, True, True, True)[0]) for v in (log_reach, p_reach))

    view = _indexed_from(b, full_qmin(b))
    fields.write_lut(self, build_lut(self, lambda x: torch.log(x.abs()), view, log_t), INNER, "lut_log")
    fields.write_lut(self, build_lut(self, torch.exp, _indexed_from(p_t, INNER.qmin), out), out.dtype, "lut_exp")
    Rescale.from_ratio(p_t.scale / (float(e.scale) * log_t.scale), st.multiplier_bits).write(self)
