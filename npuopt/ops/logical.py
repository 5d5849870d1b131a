"""Logical: comparisons (EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL) and
boolean operators (AND, OR, XOR on two inputs, NOT on one), NumPy broadcasting; the top
holds 0/1 as uint8, the type the parser writes (the tool chain's float forward gives the
same values as int32).

Quantized, in the tool chain's form: the top is uint8 0/1 (scale 1, zp 0, qinvariant).
Comparisons bring both inputs to one scale with `scale_value=[M_0, M_1]` (uint16):
(q_0 + zp_0) * M_0 compared with (q_1 + zp_1) * M_1 in exact integers. AND/OR/XOR/NOT take
the stored codes q themselves as booleans (nonzero is true), without the zero point, so
npuopt keeps them in float when an input has a nonzero zero point (code 0 is not real 0)."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import BranchRescales
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs
from ._layout import param_choice

COMPARISONS = {"EQUAL": torch.eq, "NOT_EQUAL": torch.ne, "GREATER": torch.gt,
               "GREATER_EQUAL": torch.ge, "LESS": torch.lt, "LESS_EQUAL": torch.le}
BOOLEANS = {"AND": torch.logical_and, "OR": torch.logical_or, "XOR": torch.logical_xor}
METHODS = list(COMPARISONS) + list(BOOLEANS) + ["NOT"]
ALIGN_STEPS = 8192      # the larger-scale input's multiplier when the ratio allows
MULTIPLIER_MAX = 32767  # uint16 multipliers within 15 bits


def method_and_operands(node):
    """(method, operand tensors): NOT takes one input, the others two that broadcast."""
    method = param_choice(node, "method", METHODS)
    check_inputs(node, (1,) if method == "NOT" else (2,))
    xs = [t.betensor for t in node.inputs]
    broadcast_shape(node, *xs)
    return method, xs


def apply(method: str, xs) -> torch.Tensor:
    if method == "NOT":
        return torch.logical_not(xs[0].to(torch.bool))
    if method in BOOLEANS:
        return BOOLEANS[method](xs[0].to(torch.bool), xs[1].to(torch.bool))
    return COMPARISONS[method](xs[0], xs[1])


@op_register(OpType.Logical, "1.0")
def logical_forward(self, *args):
    method, xs = method_and_operands(self)
    out = self.outputs[0]
    if self.quantized and method in COMPARISONS:
        m0, m1 = aligning_multipliers_read(self)
        xs = [QT.shifted(self.inputs[0], torch.int64) * m0, QT.shifted(self.inputs[1], torch.int64) * m1]
    y = apply(method, xs)
    if self.quantized:
        return QT.store_output(self, y, out)
    out.betensor = y.to(torch.uint8)
    return out.betensor


def aligning_multipliers_read(node):
    br = BranchRescales.read(node, 2)
    if br is None:
        raise IRError(f"layer '{node.name}' ({node.type}): quantized comparison without 'scale_value'")
    return br.multipliers


def aligning_multipliers(a, b):
    """Integer multipliers bringing q_a + zp_a and q_b + zp_b to one scale, as the tool chain
    picks them (float32 steps): with r = s_max / s_min, f = min(r * 8192, 32767) / r capped
    at 32767, M_i = trunc(s_max / s_i * f), at least 1. An integer input next to a quantized
    one counts as the larger scale (scale 1)."""
    if a.qinvariant and b.qinvariant:
        return 1, 1
    sa, sb = (torch.tensor(float(t.scale), dtype=torch.float32) for t in (a, b))
    if a.qinvariant != b.qinvariant:
        big, small = (sa, sb) if a.qinvariant else (sb, sa)
    else:
        big, small = torch.maximum(sa, sb), torch.minimum(sa, sb)
    ratio = big / small
    factor = torch.clamp(torch.clamp(ratio * ALIGN_STEPS, max=MULTIPLIER_MAX) / ratio, max=MULTIPLIER_MAX)
    return tuple(max(1, int(big / s * factor)) for s in (sa, sb))


@quant_register(OpType.Logical, "1.0")
def logical_quantize(self, *args):
    method, _ = method_and_operands(self)
    QT.check_quantized_inputs(self)
    if method in COMPARISONS:
        BranchRescales(list(aligning_multipliers(*self.inputs)), 0).write(self)
        for k in ("shift_value", "shift_type"):
            self.params.pop(k)
    else:
        for t in self.inputs:
            if not t.qinvariant and int(t.zerop) != 0:
                raise QT.Unsupported(f"layer '{self.name}' (Logical {method}): input '{t.name}' has zero point "
                                     f"{int(t.zerop)}; the tool chain tests the codes against 0, so npuopt keeps "
                                     f"this layer in float")
    out = self.outputs[0]
    dtype = Dtype.INT8 if self.force_dtype_int else Dtype.UINT8
    QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, dtype.bits, dtype.is_signed)
    out.qinvariant = True
