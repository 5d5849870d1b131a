"""ScatterElements (ONNX, torch.scatter): a copy of data (input 0) where updates (input 2)
are written at the positions the indices (input 1) give along `axis`; `reduction` NONE
(replace), ADD, MUL, MAX or MIN (combined with the value there). Indices, updates and data
have one rank, the indices no larger than the updates, nor than the data off `axis`.
Indices are taken as the tool chain takes them: a negative one counts from the end, then
each is clamped into [0, size) (size: data's IR size along `axis`).

Quantized, as the tool chain (D = q_d + zp_d, U = q_u + zp_u; docs/ir-ops.md):
  NONE/ADD/MAX/MIN: `scale_value = [M_out, M_d, M_u]`, one `shift_value`; D * M_d and
  U * M_u, each clamped to a (bits_d + bits_u)-bit accumulator, are scattered, then the
  result is rescaled by M_out * 2^-shift into the top.
  MUL: `scale_value = [M_0, M_1]`, `shift_value = [s_0, s_1]`; D rescaled by M_0 * 2^-s_0
  to 16 bits, then for each index in order (along `axis` first): the product with U in
  int32, halved until it fits 16 bits (h times), times M_1, shifted right by s_1 - h;
  the result clamped into the top (no zero point)."""
import math

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, multiplier_dtype, shift_dtype
from ..registry import OpType, op_register, quant_register
from ._movement import axis_of, integers, set_output
from ._scatter import mul_rescales, quantize_top, reduction, write_add_like

REDUCE = {"ADD": "sum", "MUL": "prod", "MAX": "amax", "MIN": "amin"}
MUL_MULTIPLIER_BITS = 14
ADD_LIKE_CLIP = 32767   # the branch multipliers' cap (int16's largest)
INT32 = 1 << 32


def _indices(node, axis: int) -> torch.Tensor:
    data, indices, updates = (t.betensor for t in node.inputs)
    fits = indices.dim() == data.dim() == updates.dim() and all(
        i <= u and (a == axis or i <= d) for a, (i, u, d) in enumerate(zip(indices.shape, updates.shape, data.shape)))
    if not fits:
        raise IRError(f"layer '{node.name}' (ScatterElements): indices {list(indices.shape)} do not fit data "
                      f"{list(data.shape)} and updates {list(updates.shape)} along axis {axis}")
    ir_shape = node.inputs[0].ir_shape
    size = int(ir_shape[axis]) if ir_shape is not None and len(ir_shape) == data.dim() else data.shape[axis]
    idx = integers(node, indices, "indices").to(data.device)
    return torch.where(idx < 0, idx + size, idx).clamp(0, max(size - 1, 0))


def _scatter(x: torch.Tensor, axis: int, idx: torch.Tensor, u: torch.Tensor, method: str) -> torch.Tensor:
    if method == "NONE":
        return x.clone().scatter_(axis, idx, u)
    return x.scatter_reduce(axis, idx, u, REDUCE[method], include_self=True)


def _int32(v: int) -> int:
    return (v + (INT32 >> 1)) % INT32 - (INT32 >> 1)


def _right_shift32(v: int, s: int) -> int:
    """An int32 shifted right by s as torch does it: a shift outside [0, 32) leaves the sign."""
    return v >> s if 0 <= s < 32 else (-1 if v < 0 else 0)


def _pairs(idx: torch.Tensor, axis: int, data_shape, updates_shape):
    """(destination, source) flat offsets in the tool chain's order: along `axis` first,
    then the other axes in C order."""
    coords = torch.stack(torch.meshgrid(*[torch.arange(n) for n in idx.shape], indexing="ij"), -1)
    coords = coords.movedim(axis, 0).reshape(-1, idx.dim())
    dest = coords.clone()
    dest[:, axis] = idx.cpu()[tuple(coords.T)]

    def flat(c, shape):
        strides = torch.tensor([math.prod(shape[a + 1:]) for a in range(len(shape))])
        return (c * strides).sum(1).tolist()
    return zip(flat(dest, data_shape), flat(coords, updates_shape))


def _quantized_mul(node, axis: int, idx: torch.Tensor) -> torch.Tensor:
    data, _, updates = node.inputs
    out = node.outputs[0]
    br = BranchRescales.read(node, 2)
    if br is None or not isinstance(br.shifts, list):
        raise IRError(f"layer '{node.name}' (ScatterElements): quantized MUL needs 'scale_value'/'shift_value' "
                      f"lists of two")
    (m0, m1), (s0, s1) = br.multipliers, br.shifts
    lo, hi = qmath.integer_range(16, out.dtype.is_signed)
    d = qmath.requantize(QT.shifted(data), m0, s0, 0, lo, hi).to(torch.int64)
    values = d.reshape(-1).tolist()
    u = QT.shifted(updates).to(torch.int64).reshape(-1).tolist()
    for dest, src in _pairs(idx, axis, d.shape, updates.betensor.shape):
        v, halvings = _int32(values[dest] * u[src]), 0
        while v > hi or v < lo:
            v, halvings = v >> 1, halvings + 1
        values[dest] = _int32(_right_shift32(_int32(v * m1), s1 - halvings))
    y = torch.tensor(values, dtype=torch.float64, device=d.device).reshape(d.shape)
    return y.clamp(out.qmin, out.qmax)


def _quantized(node, method: str, axis: int, idx: torch.Tensor) -> torch.Tensor:
    if method == "MUL":
        return _quantized_mul(node, axis, idx)
    data, _, updates = node.inputs
    out = node.outputs[0]
    br = BranchRescales.read(node, 3)
    if br is None or isinstance(br.shifts, list):
        raise IRError(f"layer '{node.name}' (ScatterElements): quantized, but 'scale_value' is not "
                      f"[M_out, M_d, M_u] with one 'shift_value'")
    m_out, m_d, m_u = br.multipliers
    lo, hi = qmath.integer_range(data.qbits + updates.qbits, out.dtype.is_signed)
    d = qmath.requantize(QT.shifted(data), m_d, 0, 0, lo, hi)
    u = qmath.requantize(QT.shifted(updates), m_u, 0, 0, lo, hi)
    return qmath.requantize(_scatter(d, axis, idx, u, method), m_out, br.shifts, out.zerop, out.qmin, out.qmax)


@op_register(OpType.ScatterElements, "1.0")
def scatterelements_forward(self, *args):
    method = reduction(self)
    data, updates = self.inputs[0].betensor, self.inputs[2].betensor
    axis = axis_of(self, data.dim(), default=0)
    idx = _indices(self, axis)
    if self.quantized:
        return QT.store_output(self, _quantized(self, method, axis, idx), self.outputs[0])
    x = data if data.is_floating_point() else data.to(torch.float32)
    return set_output(self, _scatter(x, axis, idx, updates.to(x.dtype), method))


@quant_register(OpType.ScatterElements, "1.0")
def scatterelements_quantize(self, *args):
    method = reduction(self)
    quantize_top(self)
    if method != "MUL":
        write_add_like(self, ADD_LIKE_CLIP)
        return
    (m0, s0), (m1, s1) = mul_rescales(self, MUL_MULTIPLIER_BITS)
    types = multiplier_dtype(MUL_MULTIPLIER_BITS)
    BranchRescales([m0, m1], [s0, s1], [types, types], [shift_dtype(s0), shift_dtype(s1)]).write(self)
