"""ScatterND (ONNX): a copy of data (input 0) where each index tuple of input 1 (its last
axis, k <= data's rank, addresses data's first k axes) receives the slice of updates
(input 2: indices.shape[:-1] + data.shape[k:]) at the tuple's position; `reduction` NONE
(replace), ADD, MUL, MAX or MIN combines it with the slice there. The tuples apply one by
one in C order (a later one wins, or combines with an earlier one's result). As the tool
chain takes indices: one past the end is clamped to the last position, a negative one
counts from the end.

Quantized, as the tool chain (D = q_d + zp_d, U = q_u + zp_u):
  NONE/ADD/MAX/MIN: `scale_value = [M_out, M_d, M_u]`, one `shift_value`: D * M_d and
  U * M_u combined one tuple at a time, each result clamped to 32 bits, then rescaled by
  M_out * 2^-shift into the top.
  MUL: `scale_value = [1, M_d, M_u]`, `shift_value = [s_out, 0, s_u]`: each product of
  D * M_d with U * M_u rescaled by 2^-s_u (clamped to 32 bits), then the result by
  2^-s_out into the top.
A top of more than 8 bits rounds these rescales down (a shift of the rounded product),
one of 8 bits to the nearest (half to even)."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, multiplier_dtype, shift_dtype
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._movement import integers, set_output
from ._scatter import mul_rescales, quantize_top, reduction, write_add_like

COMBINE = {"NONE": lambda a, b: b, "ADD": torch.add, "MUL": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum}


def _tuples(node):
    """The index tuples (int64 [n, k], in C order, made valid as the tool chain does) and
    the updates as n slices."""
    data, indices, updates = (t.betensor for t in node.inputs)
    k = indices.shape[-1] if indices.dim() else 0
    if not 1 <= k <= data.dim() or tuple(updates.shape) != tuple(indices.shape[:-1]) + tuple(data.shape[k:]):
        raise IRError(f"layer '{node.name}' (ScatterND): indices {list(indices.shape)} and updates "
                      f"{list(updates.shape)} do not fit data {list(data.shape)} (updates must be "
                      f"indices.shape[:-1] + data.shape[k:], k = indices.shape[-1] <= {data.dim()})")
    idx = integers(node, indices, "indices").reshape(-1, k)
    sizes = torch.tensor(data.shape[:k], device=idx.device)
    if (idx < -sizes).any():
        raise IRError(f"layer '{node.name}' (ScatterND): indices {int(idx.min())} below -size of data "
                      f"{list(data.shape)}")
    idx = torch.where(idx < 0, idx + sizes, torch.minimum(idx, sizes - 1))
    return idx.tolist(), updates.reshape((-1,) + tuple(data.shape[k:]))


def _rescale(node, x: torch.Tensor, multiplier: int, shift: int, zp, lo, hi) -> torch.Tensor:
    """The top's rounding: to nearest for 8-bit tops (qmath.requantize); for wider ones
    clamp(floor(round(x * M) * 2^-shift) - zp): the product rounded in float64, then an
    arithmetic shift (a left one when negative), the tool chain's rescale of this layer
    alone. A float64 tensor holding integers."""
    if node.outputs[0].qbits <= 8:
        return qmath.requantize(x, multiplier, shift, zp, lo, hi)
    y = torch.round(x.to(torch.float64) * float(multiplier)).to(torch.int64)
    y = y >> int(shift) if shift >= 0 else y << -int(shift)
    return (y - int(zp)).clamp_(int(lo), int(hi)).to(torch.float64)


def _quantized(node, method: str) -> torch.Tensor:
    data, _, updates = node.inputs
    out = node.outputs[0]
    br = BranchRescales.read(node, 3)
    if br is None or isinstance(br.shifts, list) != (method == "MUL"):
        want = "[s_out, 0, s_u]" if method == "MUL" else "one value"
        raise IRError(f"layer '{node.name}' (ScatterND): quantized, but 'scale_value' is not a list of three "
                      f"with 'shift_value' {want}")
    m_out, m_d, m_u = br.multipliers
    lo, hi = (-(1 << 31), (1 << 31) - 1) if out.dtype.is_signed else (0, (1 << 32) - 1)
    y = QT.shifted(data).to(torch.int64) * m_d
    tuples, slices = _tuples(node)
    u = QT.shifted(updates).to(torch.int64).reshape(slices.shape) * m_u
    for i, position in enumerate(tuples):
        at = tuple(position)
        if method == "MUL":
            y[at] = _rescale(node, y[at] * u[i], 1, br.shifts[2], 0, lo, hi).to(torch.int64)
        else:
            y[at] = COMBINE[method](y[at], u[i]).clamp(lo, hi)
    shift = br.shifts[0] if method == "MUL" else br.shifts
    return _rescale(node, y, m_out, shift, out.zerop, out.qmin, out.qmax)


@op_register(OpType.ScatterND, "1.0")
def scatternd_forward(self, *args):
    method = reduction(self)
    if self.quantized:
        return QT.store_output(self, _quantized(self, method), self.outputs[0])
    data = self.inputs[0].betensor
    y = data.clone() if data.is_floating_point() else data.to(torch.float32)
    tuples, slices = _tuples(self)
    slices = slices.to(y.dtype)
    for i, position in enumerate(tuples):
        at = tuple(position)
        y[at] = COMBINE[method](y[at], slices[i])
    return set_output(self, y)


@quant_register(OpType.ScatterND, "1.0")
def scatternd_quantize(self, *args):
    method = reduction(self)
    quantize_top(self)
    data, _, updates = self.inputs
    if method != "MUL":
        clip_bits = 14 if 16 in (data.qbits, updates.qbits) else 15
        write_add_like(self, (1 << (clip_bits - 1)) - 1)
        return
    bits = settings_of(self).activation_bits
    (m_d, s_out), (m_u, s_u) = mul_rescales(self, bits)
    types, shifts = multiplier_dtype(bits), [shift_dtype(s_out), shift_dtype(s_u)]
    BranchRescales([1, m_d, m_u], [s_out, 0, s_u], [types, types, types], shifts[:1] + shifts).write(self)
