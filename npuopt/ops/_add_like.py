"""The rescale the tool chain gives an elementwise add of two quantized operands (its
add-like Eltwise's choice, which ScatterElements, ScatterND and NormalizedMoments take
too): with A and B the operands' integers plus their zero points,

    out = (A * M_a + B * M_b) * M_out * 2^-shift,

each operand's scale as a 15-bit multiplier and shift, each branch multiplier the other
operand's multiplier on the larger of the two shifts, both scaled down together under a
cap, M_out the ratio of the output's scale to the rest (a negative shift folded into
M_out, capped too). Computed in float32, as the tool chain does."""
import torch

from ..quant import qmath

BRANCH_MULTIPLIER_BITS = 16  # the operands' scales as multipliers of this width (15 at most are taken)


def _f32(v) -> torch.Tensor:
    return torch.tensor(float(v), dtype=torch.float32)


def _approximation(scale, bits: int):
    m, s = qmath.scale_approximation(_f32(scale), bits)
    return _f32(m), _f32(s)


def add_like_rescale(scale_a, scale_b, scale_out, clip_max: int, multiplier_bits: int):
    """(M_a, M_b, M_out, shift) of an add of operands of scales scale_a, scale_b into an
    output of scale_out, the branch multipliers at most clip_max."""
    (m0, n0), (m1, n1) = (_approximation(s, BRANCH_MULTIPLIER_BITS) for s in (scale_a, scale_b))
    cshift = torch.maximum(n0, n1)
    m_a, m_b = m1 * 2.0 ** (cshift - n1), m0 * 2.0 ** (cshift - n0)
    ratio = _f32(scale_out) / (_f32(scale_b) * _f32(scale_a)) / 2.0 ** cshift
    shrink = torch.maximum(m_a, m_b) / clip_max
    if shrink > 1.0:
        m_a, m_b, ratio = m_a / shrink, m_b / shrink, ratio * shrink
    m_a, m_b = (int(torch.round(m).clamp(0, clip_max)) for m in (m_a, m_b))
    m_out, shift = qmath.scale_approximation(ratio, multiplier_bits)
    if shift < 0:
        m_out, shift = max(1, min(clip_max, m_out * 2 ** -shift)), 0
    return m_a, m_b, m_out, shift
