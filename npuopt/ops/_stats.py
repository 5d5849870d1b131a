"""What the statistics and table layers (EmbeddingLookupSparse, SufficientStatistics,
NormalizedMoments, Normalization) share: a layer's internal tensors (its placeholders:
EmbeddingLookupSparse's sums, NormalizedMoments' squared mean), kept on the layer in
float forwards so that they are calibrated like its outputs (node._observe_placeholders),
then given the symmetric grid the tool chain gives them (QuantMode.to_symmetric of the
activation method); and the bits of the smallest integer range holding a range (the tool
chain's range2bits)."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales
from ..quant.settings import settings_of
from ..tensor import PyTensor


def keep_internal(node, values) -> None:
    """Set the layer's placeholders to `values` (float tensors, made on the first call)."""
    while len(node.placeholders) < len(values):
        node.placeholders.append(PyTensor(f"{node.name}/internal{len(node.placeholders)}"))
    for t, v in zip(node.placeholders, values):
        t.betensor = v.detach().to(torch.float32)


def quantize_internal_symmetric(node, t: PyTensor, signed: bool) -> None:
    """t on the symmetric grid of the activation method (restricted range where the
    method is asymmetric) over its calibrated range, zero point 0."""
    st = settings_of(node)
    method = st.quantize_method_for_activation.to_symmetric()
    lo, hi = QT.activation_range(node, t, True)
    scale, zp, qmin, qmax = qmath.linear_quant_params(min(lo, 0.0), max(hi, 0.0), st.activation_bits, True,
                                                      method.full_range, signed)
    QT.set_quantization(t, scale, zp, qmin, qmax, st.activation_bits, signed)


def bits_holding(lo: int, hi: int, signed: bool) -> int:
    """The fewest bits whose range holds [lo, hi]: signed when asked or when lo < 0."""
    signed = signed or lo < 0
    return next(b for b in range(1 if signed else 0, 128)
                if qmath.integer_range(b, signed)[0] <= lo and hi <= qmath.integer_range(b, signed)[1])


def shifted_bits(t) -> int:
    """The bits of the smallest signed range holding every q + zp of quantized t."""
    return bits_holding(t.qmin + int(t.zerop), t.qmax + int(t.zerop), True)


def stored_rescales(node, count: int, prefix: str = "", shifts: int = None) -> BranchRescales:
    """The `count` multipliers a quantized layer stores as a `<prefix>scale_value` list and
    its `<prefix>shift_value`: a list of `shifts` (default: one per multiplier), or one
    value when `shifts` is 1. The shifts are returned as a list."""
    r = BranchRescales.read(node, count, prefix)
    if r is None:
        raise IRError(f"layer '{node.name}' ({node.type}): quantized, but '{prefix}scale_value' is missing")
    shifts = count if shifts is None else shifts
    got = r.shifts if isinstance(r.shifts, list) else [r.shifts]
    if len(got) != shifts or (shifts > 1 and not isinstance(r.shifts, list)):
        raise IRError(f"layer '{node.name}' ({node.type}): {prefix}shift_value has {len(got)} shifts, "
                      f"expected {shifts}")
    r.shifts = got
    return r
