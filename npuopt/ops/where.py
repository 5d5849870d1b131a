"""Where: out = x1 where the condition (input 0) is nonzero, else x2; the three inputs
broadcast as NumPy's. Float: as the tool chain, when x1 and x2 have different dtypes the
one of fewer bits is converted to the other's (x1's on a tie).

Quantized, in the tool chain's form: `scale_value=[M_1, M_2]`, `shift_value=[s_1, s_2]`
(lists of two); x_i' = requantize(q_i + zp_i, M_i, s_i) into the top, then the condition
q_0 + zp_0 picks between them. When x1 and x2 are both integers (qinvariant) the top is
too (scale 1, the wider of their bits) with M = 1, s = 0."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, multiplier_dtype, shift_dtype
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs


def _bits(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size() * 8


def float_where(cond: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    if x1.dtype != x2.dtype:
        if _bits(x1.dtype) >= _bits(x2.dtype):
            x2 = x2.to(x1.dtype)
        else:
            x1 = x1.to(x2.dtype)
    return torch.where(cond.to(torch.bool), x1, x2)


@op_register(OpType.Where, "1.0")
def where_forward(self, *args):
    check_inputs(self, (3,))
    broadcast_shape(self, *(t.betensor for t in self.inputs))
    cond, a, b = self.inputs
    out = self.outputs[0]
    if not self.quantized:
        out.betensor = float_where(cond.betensor, a.betensor, b.betensor)
        return out.betensor
    br = BranchRescales.read(self, 2)
    if br is None or not isinstance(br.shifts, list):
        raise IRError(f"layer '{self.name}' ({self.type}): quantized, but 'scale_value'/'shift_value' "
                      f"are not lists of two")
    picked = [qmath.requantize(QT.shifted(t), m, s, out.zerop, out.qmin, out.qmax)
              for t, m, s in zip((a, b), br.multipliers, br.shifts)]
    y = torch.where(QT.shifted(cond) != 0, *picked)
    return QT.store_output(self, y, out)


@quant_register(OpType.Where, "1.0")
def where_quantize(self, *args):
    check_inputs(self, (3,))
    QT.check_quantized_inputs(self)
    _, a, b = self.inputs
    out = self.outputs[0]
    signed = a.dtype.is_signed or b.dtype.is_signed
    if a.qinvariant and b.qinvariant:
        bits = max(a.qbits, b.qbits)
        dtype = Dtype.integer(bits, signed)
        QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, bits, signed)
        out.qinvariant = True
        BranchRescales([1, 1], [0, 0], Dtype.UINT8, [Dtype.INT8, Dtype.INT8]).write(self)
        return
    QT.quantize_activation(self, out, signed=signed)
    bits = settings_of(self).multiplier_bits
    pairs = [qmath.scale_approximation(out.scale / (1.0 if t.qinvariant else t.scale), bits) for t in (a, b)]
    shifts = [s for _, s in pairs]
    BranchRescales([m for m, _ in pairs], shifts, multiplier_dtype(bits), [shift_dtype(s) for s in shifts]).write(self)
