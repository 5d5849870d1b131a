"""Mod: the remainder of input 0 by input 1 (NumPy broadcasting), `fmod` false (default:
a - floor(a / b) * b, the divisor's sign) or true (C's fmod, the dividend's sign). As the
tool chain, the float forward computes in float32 whatever the inputs' types (PyTorch's
floor division, then a - q * b), a zero divisor giving NaN; an integer top takes the
result as the tool chain fits a top to its type (NaN 0, clamped).

Quantized in the tool chain's form, `scale_value = [M_0, M_1]`, `shift_value = [s_0, s_1]`:
each input is brought to the output's scale, x_i = requantize(q_i + zp_i, M_i, s_i) clamped
to that input's own range [qmin_i, qmax_i] (zero point 0), then out = clamp(mod(x_0, x_1)
- zp_out) into the top (a zero x_1 counts as 1, so the remainder is 0). Two integer inputs
give an integer top (the float IR's type, scale 1) with M = 1, s = 0. npuopt caps the
output's scale so that no x_i can reach its input's range (a dividend beyond the divisor's
range would otherwise saturate there, the tool chain's own choice from the output's
calibrated range)."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import SHIFT_DTYPE, BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs
from ._integer import fit_top, original_integer_top, promoted
from ._movement import bool_param


def remainder(a: torch.Tensor, b: torch.Tensor, fmod: bool) -> torch.Tensor:
    """The tool chain's expressions: torch.fmod, or a - floor_div(a, b) * b."""
    if fmod:
        return torch.fmod(a, b)
    return a - torch.div(a, b, rounding_mode="floor") * b


def _operands(node):
    check_inputs(node, (2,))
    fmod = bool_param(node, "fmod", False)
    broadcast_shape(node, *(t.betensor for t in node.inputs))
    return fmod


def _natural(node) -> Dtype:
    dtypes = [t.dtype for t in node.inputs]
    return promoted(*dtypes) if all(d.is_integer for d in dtypes) else Dtype.FP32


@op_register(OpType.Mod, "1.0")
def mod_forward(self, *args):
    fmod = _operands(self)
    out = self.outputs[0]
    if not self.quantized:
        a, b = (computing_float(t.betensor) for t in self.inputs)
        return fit_top(out, remainder(a, b, fmod), _natural(self))
    br = BranchRescales.read(self, 2)
    if br is None or not isinstance(br.shifts, list):
        raise IRError(f"layer '{self.name}' ({self.type}): quantized, but 'scale_value'/'shift_value' are not "
                      f"lists of two")
    a, b = (qmath.requantize(QT.shifted(t), m, s, 0, t.qmin, t.qmax)
            for t, m, s in zip(self.inputs, br.multipliers, br.shifts))
    r = remainder(a, torch.where(b == 0, 1.0, b), fmod)  # by 1 where b is 0: the tool chain's fallback
    return QT.store_output(self, qmath.requantize(r, 1, 0, out.zerop, out.qmin, out.qmax), out)


@quant_register(OpType.Mod, "1.0")
def mod_quantize(self, *args):
    _operands(self)
    QT.check_quantized_inputs(self)
    out = self.outputs[0]
    if all(t.qinvariant for t in self.inputs):
        original_integer_top(out, _natural(self))
        BranchRescales([1, 1], [0, 0], Dtype.UINT8, [SHIFT_DTYPE, SHIFT_DTYPE]).write(self)
        return
    lo, hi = QT.activation_range(self, out, settings_of(self).quantize_method_for_activation.symmetric)
    QT.quantize_activation(self, out, lo, hi)
    cap = min(_largest_scale(self, t) for t in self.inputs)
    if out.scale > cap:  # widen the range so that the scale comes down to the cap
        widen = float(out.scale) / cap
        QT.quantize_activation(self, out, lo * widen, hi * widen)
    rescales = [Rescale.from_ratio(out.scale / t.scale, out.qbits) for t in self.inputs]
    BranchRescales([r.multiplier for r in rescales], [r.shift for r in rescales], rescales[0].multiplier_type,
                   [r.shift_type for r in rescales]).write(self)


CAP_MARGIN = 1 - 2 ** -7  # an 8-bit multiplier's rounding must not carry a value past its bound


def _largest_scale(node, t) -> float:
    """The largest output scale at which input t, brought to it, stays inside t's range:
    its integers A = q + zp reach [qmin + zp, qmax + zp] (a scaled input; an integer one,
    scale 1, its calibrated values where it has statistics)."""
    if t.qinvariant and t.statistics is not None and not t.statistics.empty:
        ends = QT.activation_range(node, t, False)
    else:
        ends = (t.qmin + float(t.zerop), t.qmax + float(t.zerop))
    room = [(t.qmax if e > 0 else -t.qmin, abs(e)) for e in ends if e != 0]  # (bound, reach) on each side
    return float(t.scale) * min((bound / reach for bound, reach in room if bound > 0), default=1.0) * CAP_MARGIN
