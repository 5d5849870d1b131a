"""What ScatterElements and ScatterND share: the `reduction` param, the quantization of
their top and the multipliers they store, chosen as the tool chain chooses them.

Quantized, the tool chain's form (D = q_data + zp_data, U = q_updates + zp_updates):
NONE/ADD/MAX/MIN keep `scale_value = [M_out, M_d, M_u]`, one `shift_value`: D * M_d and
U * M_u are scattered (the tops of both on one grid), then rescaled by M_out * 2^-shift
into the top; MUL keeps two or three multipliers and shifts of its own (each op's
docstring)."""
import torch

from ..dtype import Dtype
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, multiplier_dtype, shift_dtype
from ..quant.settings import settings_of
from ._broadcast import check_inputs
from ._layout import param_choice

REDUCTIONS = ["NONE", "ADD", "MUL", "MAX", "MIN"]
ADD_LIKE_MULTIPLIER_BITS = 16  # the branch multipliers' width (uint16, at most the clip)


def reduction(node) -> str:
    check_inputs(node, (3,))
    return param_choice(node, "reduction", REDUCTIONS, "NONE")


def _f32(v) -> torch.Tensor:
    return torch.tensor(float(v), dtype=torch.float32)


def _approximation(ratio: torch.Tensor, bits: int):
    m, s = qmath.scale_approximation(ratio, bits)
    return _f32(m), _f32(s)


def add_like_multipliers(node, clip_max: int):
    """([M_out, M_d, M_u], shift) of NONE/ADD/MAX/MIN, as the tool chain's add-like
    eltwise rescale: each input scale as a 15-bit multiplier and shift, the branch
    multipliers the other input's multiplier on the larger shift, scaled down together
    under `clip_max`, the output's ratio over the rest; inputs on one grid (the same scale
    and zero point) take M_d = M_u = 1. Then both branch multipliers are halved, and the
    shift lowered, until they fit activation_bits."""
    data, _, updates = node.inputs
    out = node.outputs[0]
    st = settings_of(node)
    if data.scale == updates.scale and data.zerop == updates.zerop:
        m_out, shift = qmath.scale_approximation(out.scale / data.scale, st.multiplier_bits,
                                                 force_shift_positive=bool(node.force_shift_positive))
        return [m_out, 1, 1], shift
    (m0, n0), (m1, n1) = (_approximation(_f32(t.scale), ADD_LIKE_MULTIPLIER_BITS) for t in (data, updates))
    cshift = torch.maximum(n0, n1)
    m_data, m_updates = m1 * 2.0 ** (cshift - n1), m0 * 2.0 ** (cshift - n0)
    ratio = _f32(out.scale) / (_f32(updates.scale) * _f32(data.scale)) / 2.0 ** cshift
    shrink = torch.maximum(m_data, m_updates) / clip_max
    if shrink > 1.0:
        m_data, m_updates, ratio = m_data / shrink, m_updates / shrink, ratio * shrink
    m_data, m_updates = (int(torch.round(m).clamp(0, clip_max)) for m in (m_data, m_updates))
    m_out, shift = qmath.scale_approximation(ratio, st.multiplier_bits)
    if shift < 0:
        m_out, shift = max(1, min(clip_max, m_out * 2 ** -shift)), 0
    limit = 1 << st.activation_bits
    while m_data >= limit or m_updates >= limit:
        m_data, m_updates, shift = round(m_data / 2), round(m_updates / 2), shift - 1
    return [m_out, m_data, m_updates], shift


def quantize_top(node) -> None:
    """The top's quantization: the activation settings' (signed when an input is), or,
    when data and updates are both integers, an integer top wide enough for them and its
    calibrated range."""
    QT.check_quantized_inputs(node)
    data, _, updates = node.inputs
    out = node.outputs[0]
    signed = data.dtype.is_signed or updates.dtype.is_signed
    if not (data.qinvariant and updates.qinvariant):
        QT.quantize_activation(node, out, signed=signed)
        return
    stats = out.statistics
    lo, hi = (stats.min, stats.max) if stats is not None and not stats.empty else (0, 0)
    bits = max(Dtype.narrowest_holding(lo, hi, force_int=signed).bits, data.qbits, updates.qbits)
    dtype = Dtype.integer(bits, signed)
    QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, bits, signed)
    out.qinvariant = True


def write_add_like(node, clip_max: int) -> None:
    multipliers, shift = add_like_multipliers(node, clip_max)
    narrow = multiplier_dtype(settings_of(node).activation_bits)
    BranchRescales(multipliers, shift, [Dtype.UINT16, narrow, narrow], shift_dtype(shift)).write(node)


def mul_rescales(node, bits: int):
    """(M, s) of the ratios top / data and 1 / updates: the rescales of MUL."""
    data, _, updates = node.inputs
    out = node.outputs[0]
    positive = bool(node.force_shift_positive)
    return [qmath.scale_approximation(ratio, bits, force_shift_positive=positive)
            for ratio in (out.scale / data.scale, 1.0 / updates.scale)]
