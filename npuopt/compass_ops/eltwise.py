"""OPT's ops/eltwise.py helpers: the Eltwise forward and quantize (npuopt's), and the
rescale of an elementwise ADD/SUB/MAX/MIN or MUL that OPT's files of other layers
(ScatterND, NormalizedMoments, ...) write: for ADD-like methods, with A and B the
input integers plus their zero points,
    out = (A * M_a + B * M_b) * M_out * 2^-shift, `scale_value=[M_out, M_a, M_b]`,
and for MUL out = A * B * M * 2^-shift, as npuopt's Eltwise computes them."""
import math

import torch

from ..dtype import Dtype
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate, in_npuopt_form
from .activation import apply_with_activation, apply_with_activation_quantize  # noqa: F401
from .activation import with_activation_out_is_signed

eltwise = delegate(OP_FORWARDS, OpType.Eltwise)
eltwise_quantize = delegate(OP_QUANTIZERS, OpType.Eltwise)
BRANCH_MULTIPLIER_MAX = 32767  # the tool chain's int16 branch multipliers (OPT's default clip_max)


@in_npuopt_form
def calc_eltwise_add_like_scale_shift(inp0, inp1, out, doscale_clip_max, multiplier_bits, _layer_type,
                                      _layer_id="unknow"):
    """Integers M_a, M_b (at most doscale_clip_max), M_out and shift >= 0 with
    M_i * M_out * 2^-shift ~= out.scale / inp_i.scale; returns (M_a, M_b, M_out, shift,
    M_out's dtype, shift's dtype, the scale of A * M_a + B * M_b), as int64 tensors."""
    cap = int(min(float(doscale_clip_max), BRANCH_MULTIPLIER_MAX))
    ratios = [float(out.scale) / float(t.scale) for t in (inp0, inp1)]
    shift = math.floor(math.log2(cap / max(ratios))) if max(ratios) > 0 else 0
    m_out = 1
    if shift < 0:  # the output is far finer than an input: M_out carries the excess
        m_out, shift = min((1 << min(int(multiplier_bits), 15)) - 1, 1 << -shift), 0
    m_a, m_b = (max(0, min(cap, round(r * 2.0 ** shift / m_out))) for r in ratios)
    sum_scale = float(out.scale) * 2.0 ** shift / m_out
    return (torch.tensor(m_a), torch.tensor(m_b), torch.tensor(m_out), torch.tensor(shift),
            range2dtype(0, m_out)[1], range2dtype(-1, shift)[1], sum_scale)


@in_npuopt_form
def eltwise_quantizes(self, *args) -> None:
    """Quantize the output of param `method` (ADD, SUB, MAX, MIN, NONE or MUL) on inputs 0
    and 1 and write its rescale; the output is signed by the with_activation, or, without
    one, when an input is signed or the method is SUB; two integer (qinvariant) inputs
    give an integer output wide enough for its range."""
    a, b = self.inputs[0], self.inputs[1]
    out = self.outputs[0]
    method = str(self.get_param("method")).upper()
    st = settings_of(self)
    if str(self.get_param("with_activation", optional=True, default_value="none")).lower() == "none":
        signed = a.dtype.is_signed or b.dtype.is_signed or method == "SUB"
    else:
        signed = with_activation_out_is_signed(self) or self.force_dtype_int
    if a.qinvariant and b.qinvariant:
        bits = max(range2dtype(out.extrema_min, out.extrema_max, force_int=signed)[0], a.qbits, b.qbits)
        lo, hi = bits2range(bits, signed)
        QT.set_quantization(out, 1.0, 0, lo, hi, bits, signed)
        out.qinvariant = True
    else:
        QT.quantize_activation(self, out, signed=signed)
    if method == "MUL":
        Rescale.from_ratio(out.scale / (a.scale * b.scale), st.multiplier_bits).write(self)
        return
    clip_max = bits2range(int(self.attrs["clip_max_bits"]), True)[1] if "clip_max_bits" in self.attrs \
        else BRANCH_MULTIPLIER_MAX
    m_a, m_b, m_out, shift, _, shift_type, _ = calc_eltwise_add_like_scale_shift(a, b, out, clip_max,
                                                                                  st.multiplier_bits, self.type)
    BranchRescales([int(m_out), int(m_a), int(m_b)], int(shift), Dtype.UINT16, shift_type).write(self)
