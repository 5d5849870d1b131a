"""What ScatterElements and ScatterND share: the `reduction` param, the quantization of
their top and the multipliers they store, chosen as the tool chain chooses them.

Quantized, the tool chain's form (D = q_data + zp_data, U = q_updates + zp_updates):
NONE/ADD/MAX/MIN keep `scale_value = [M_out, M_d, M_u]`, one `shift_value`: D * M_d and
U * M_u are scattered (the tops of both on one grid), then rescaled by M_out * 2^-shift
into the top; MUL keeps two or three multipliers and shifts of its own (each op's
docstring)."""

from ..dtype import Dtype
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, multiplier_dtype, shift_dtype
from ..quant.settings import settings_of
from ._add_like import add_like_rescale
from ._broadcast import check_inputs
from ._layout import param_choice

REDUCTIONS = ["NONE", "ADD", "MUL", "MAX", "MIN"]


def reduction(node) -> str:
    check_inputs(node, (3,))
    return param_choice(node, "reduction", REDUCTIONS, "NONE")


def add_like_multipliers(node, clip_max: int):
    """([M_out, M_d, M_u], shift) of NONE/ADD/MAX/MIN, as the tool chain's add-like
    eltwise rescale (_add_like) under `clip_max`; inputs on one grid (the same scale and
    zero point) take M_d = M_u = 1. Then both branch multipliers are halved, and the shift
    lowered, until they fit activation_bits."""
    data, _, updates = node.inputs
    out = node.outputs[0]
    st = settings_of(node)
    if data.scale == updates.scale and data.zerop == updates.zerop:
        m_out, shift = qmath.scale_approximation(out.scale / data.scale, st.multiplier_bits,
                                                 force_shift_positive=bool(node.force_shift_positive))
        return [m_out, 1, 1], shift
    m_data, m_updates, m_out, shift = add_like_rescale(data.scale, updates.scale, out.scale, clip_max,
                                                       st.multiplier_bits)
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
