"""Cumulate: running SUM or PROD along `axis`; `exclusive` leaves each element out of its
own result (the first is 0 for SUM, 1 for PROD), `reverse` runs from the end.

Quantized, as the tool chain computes it, on A = q + zp_in:
  SUM   the running sum of A in float32 (exact below 2^24), each prefix requantized:
        round_half_even(S * M * 2^-s) - zp_out, saturated (scale_value/shift_value, the
        ratio s_out / s_in with 15-bit multipliers);
  PROD  the running product P (float32 multiply) is kept within 16 bits (the input's
        signedness) by halving (arithmetic shift right) and counting the halvings h;
        prefix j is requantize(P, scale[j], shift[j] - h): the constants `scale`/`shift`
        hold, per position, (1/s_in)^(j+1) * s_out as a 15-bit multiplier and shift
        (each factor and each product halved down to 15 bits the same way)."""
import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..dtype import Dtype
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import axis_of, bool_param, set_output

MULT_BITS = 15


def _halve_into(v: torch.Tensor, lo: int, hi: int):
    """v (int64) shifted right element by element until within [lo, hi]; (v, shifts)."""
    v, shifts = v.clone(), torch.zeros_like(v)
    out = (v > hi) | (v < lo)
    while out.any():
        v = torch.where(out, v >> 1, v)
        shifts += out.to(torch.int64)
        out = (v > hi) | (v < lo)
    return v, shifts


def _halve_int(v: int, hi: int):
    shifts = 0
    while v > hi:
        v, shifts = v >> 1, shifts + 1
    return v, shifts


def _geometry(node):
    x = node.inputs[0].betensor
    axis = axis_of(node, x.dim())
    return (x, axis, param_choice(node, "method", ["SUM", "PROD"]), bool_param(node, "exclusive", False),
            bool_param(node, "reverse", False))


def _running(a: torch.Tensor, method: str, exclusive: bool, step):
    """Rows of a ([outer, n]) accumulated left to right; step(acc, j) post-processes every
    prefix (returns (acc carried on, prefix value))."""
    n = a.shape[1]
    neutral = torch.zeros if method == "SUM" else torch.ones
    if exclusive:
        a = torch.cat([neutral((a.shape[0], 1), dtype=a.dtype, device=a.device), a[:, :n - 1]], dim=1)
    acc = neutral(a.shape[0], dtype=a.dtype, device=a.device)
    cols = []
    for j in range(n):
        acc = acc + a[:, j] if method == "SUM" else acc * a[:, j]
        acc, value = step(acc, j)
        cols.append(value)
    return torch.stack(cols, dim=1) if cols else a


@op_register(OpType.Cumulate, "1.0")
def cumulate_forward(self, *args):
    x, axis, method, exclusive, reverse = _geometry(self)
    rows = x.movedim(axis, -1)
    shape = rows.shape
    rows = rows.reshape(-1, shape[-1])
    if reverse:
        rows = rows.flip(1)
    if not self.quantized:
        out = _running(rows, method, exclusive, lambda acc, j: (acc, acc))
    else:
        inp, top = self.inputs[0], self.outputs[0]
        a = QT.shifted(inp, torch.float32)
        a = (a.movedim(axis, -1).reshape(-1, shape[-1]))
        a = a.flip(1) if reverse else a
        r = Rescale.read(self)
        if method == "SUM":
            def step(acc, j):
                return acc, qmath.requantize(acc, r.multiplier, r.shift, top.zerop, top.qmin, top.qmax)
            out = _running(a, method, exclusive, step)
        else:
            lo, hi = (-(1 << 15), (1 << 15) - 1) if inp.dtype.is_signed else (0, (1 << 16) - 1)
            m, s = (torch.as_tensor(v).reshape(-1) for v in (r.multiplier, r.shift))
            if m.numel() != shape[-1]:
                raise IRError(f"layer '{self.name}' (Cumulate): {m.numel()} scale/shift entries for an axis "
                              f"of {shape[-1]}")
            halvings = torch.zeros(a.shape[0], dtype=torch.int64, device=a.device)

            def step(acc, j):
                nonlocal halvings
                kept, h = _halve_into(acc.to(torch.int64), lo, hi)
                halvings = halvings + h
                shift = int(s[j]) - halvings
                value = qmath.requantize(kept, torch.full_like(shift, int(m[j])), shift, top.zerop, top.qmin, top.qmax)
                return kept.to(torch.float32), value
            out = _running(a, method, exclusive, step)
        out = out.to(torch.float64)
    if reverse:
        out = out.flip(1)
    out = out.reshape(shape).movedim(-1, axis)
    if self.quantized:
        return QT.store_output(self, out, self.outputs[0])
    return set_output(self, out)


@quant_register(OpType.Cumulate, "1.0")
def cumulate_quantize(self, *args):
    QT.check_quantized_inputs(self)
    inp, out = self.inputs[0], self.outputs[0]
    if inp.qinvariant:
        raise QT.Unsupported(f"layer '{self.name}' (Cumulate): an unquantized (integer) input is not supported")
    shape = [int(d) for d in inp.ir_shape]
    axis = axis_of(self, len(shape))
    method = param_choice(self, "method", ["SUM", "PROD"])
    exclusive = bool_param(self, "exclusive", False)
    QT.quantize_activation(self, out, signed=inp.dtype.is_signed)
    if method == "SUM":
        Rescale.from_ratio(out.scale / inp.scale, MULT_BITS).write(self)
        return
    m_in, s_in = qmath.scale_approximation(1.0 / inp.scale, MULT_BITS)
    m_out, s_out = qmath.scale_approximation(out.scale, MULT_BITS)
    top = (1 << MULT_BITS) - 1
    n = shape[axis]
    if n < 2:
        raise QT.Unsupported(f"layer '{self.name}' (Cumulate): PROD along an axis of one element is not supported")
    scales, shifts = [], []
    cur_m, cur_s, dropped = (1, 0, 0) if exclusive else (m_in, s_in, 0)
    for j in range(n):
        if j:
            cur_m, h = _halve_int(cur_m * m_in, top)
            cur_s, dropped = cur_s + s_in, dropped + h
        if j == 0 and exclusive:
            scales.append(m_out), shifts.append(s_out)
            continue
        prod, h = _halve_int(cur_m * m_out, top)
        scales.append(prod), shifts.append(cur_s + s_out - dropped - h)
    Rescale(torch.tensor(scales), torch.tensor(shifts), Dtype.UINT16, Dtype.INT32).write(self)
