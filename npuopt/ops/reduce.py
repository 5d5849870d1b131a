"""Reduce over a list of axes (global average pooling is MEAN over [1, 2]), in the tool
chain's forms. The reduced axes are kept with size 1, as the tool chain does (the
parser writes no `keepdims` and adds a Reshape instead); a `keepdims=false` from
another writer drops them (the tool chain would ignore it).

Float (float32, as the tool chain): MEAN = sum / (elements in / elements out), SUM,
MAX, MIN, PROD (one axis after the other), L1 = sum |x|, L2 = sqrt(sum x^2),
VARIANCE = sum (x - mean)^2 / n (UNBIASED_VARIANCE: / (n - 1)), ALL/ANY as 0/1.

Quantized, with A = q + zp_in, M/s = scale_value/shift_value and
R(X, M, s) = clamp(round_half_even(X * M * 2^-s) - zp_out) (qmath.requantize):
* MAX, MIN: the max/min of q, quantization passed through;
* SUM, MEAN: R(sum A) (MEAN's 1/n is part of M/s);
* L1: S = min(sum |A|, 2^32 - 1), d = max(0, ceil(log2(fl32(max S))) - 16) with the
  max over the whole batch and log2 in float32, R(min(S >> d, 65535), M, s - d),
  output unsigned;
* L2: S and d as for L1 from sum A^2, P = clamp(round_half_even(min(S >> d, 65535) *
  M * 2^-(s - d)), 0, 65535), then `sqrt_lut` looked up at P (qmath.lut_lookup, 16
  index bits);
* VARIANCE (UNBIASED_): in float32 on q, as the tool chain (torch's reduction order):
  m = round_half_even(mean(q)), S = sum (q - m)^2; R(S), output unsigned;
* PROD: per output element, P = 1 and for each reduced A (row-major over the axes in
  the IR's order): P = P * A, then P >> 1 (floor) while P is outside the 16-bit range
  (signed when qmin + zp_in < 0), counting the shifts t; R(P, M, s - t);
* ALL/ANY: whether all/any A != 0 as 0/1, an unquantized (qinvariant) uint8 output.
"""
import math

import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._layout import axis_list, param_choice

METHODS = ["MEAN", "SUM", "MAX", "MIN", "PROD", "L1", "L2", "VARIANCE", "UNBIASED_VARIANCE", "ALL", "ANY"]
PASS_THROUGH = ("MAX", "MIN")
LOGICAL = ("ALL", "ANY")
WIDE_MULTIPLIER_BITS = 15   # L1/L2/VARIANCE/PROD rescales, as the tool chain sizes them
WIDE_SHIFT_CEIL = 63
SUM_LIMIT = (1 << 32) - 1   # L1/L2 sums are held in uint32 ...
SUM_KEPT_BITS = 16          # ... and their top 16 bits rescaled
PROD_BITS = 16


def reduce_method(node) -> str:
    return param_choice(node, "method", METHODS)


def reduce_axes(node, ndim: int):
    """The reduced axes, non-negative, in the IR's order: PROD multiplies along them in
    that order, as the tool chain (the parser lists them ascending)."""
    axis_list(node, "axis", ndim)  # the checks
    axes = node.get_param("axis")
    return [int(a) % ndim for a in ([axes] if isinstance(axes, int) else axes)]


def reduced_count(node, shape, axes) -> int:
    n = math.prod(int(shape[a]) for a in axes)
    return n - 1 if reduce_method(node) == "UNBIASED_VARIANCE" else n


# ---- float ------------------------------------------------------------------------
def reduce_float(method, x, axes, out_dtype):
    if method == "MEAN":
        total = torch.sum(x, axes, keepdim=True)
        return total / (x.numel() / total.numel()) if total.numel() else total
    if method == "SUM":
        return torch.sum(x, axes, keepdim=True)
    if method == "MAX":
        return torch.amax(x, axes, keepdim=True)
    if method == "MIN":
        return torch.amin(x, axes, keepdim=True)
    if method == "PROD":
        for a in axes:
            x = torch.prod(x, a, keepdim=True)
        return x
    if method == "L1":
        return torch.sum(torch.abs(x), axes, keepdim=True)
    if method == "L2":
        return torch.sqrt(torch.sum(x * x, axes, keepdim=True))
    if method in LOGICAL:
        return logical_reduce(method, x != 0, axes).to(out_dtype.torch_dtype)
    mean = torch.mean(x, dim=axes, keepdim=True)
    count = math.prod(x.shape[a] for a in axes) - (method == "UNBIASED_VARIANCE")
    return torch.sum((x - mean) ** 2, dim=axes, keepdim=True) / count


def logical_reduce(method, nonzero: torch.Tensor, axes):
    fn = torch.all if method == "ALL" else torch.any
    for a in axes:
        nonzero = fn(nonzero, a, keepdim=True)
    return nonzero


# ---- integer ----------------------------------------------------------------------
def top_bits(sums: torch.Tensor) -> int:
    """d for L1/L2: the right shift that leaves the batch's largest sum 16 bits (its
    bit count taken as ceil(log2) of its float32 value, in float32, as the tool chain)."""
    if not sums.numel():
        return 0
    top = sums.max().to(torch.float32)
    return max(0, int(torch.ceil(torch.log2(top))) - SUM_KEPT_BITS) if float(top) > 0 else 0


def prod_quantized(a: torch.Tensor, axes, signed: bool):
    """(P, t) of the PROD description, P and t shaped like the output."""
    keep = [d for d in range(a.dim()) if d not in axes]
    out_shape = [1 if d in axes else a.shape[d] for d in range(a.dim())]
    rows = a.permute(keep + list(axes)).reshape(math.prod(a.shape[d] for d in keep), -1)
    lo, hi = qmath.integer_range(PROD_BITS, signed)
    p = torch.ones(rows.shape[0], dtype=torch.int64, device=a.device)
    shifts = torch.zeros_like(p)
    for j in range(rows.shape[1]):
        p = p * rows[:, j]
        while True:
            over = (p > hi) | (p < lo)
            if not bool(over.any()):
                break
            p = torch.where(over, p >> 1, p)
            shifts += over.to(torch.int64)
    return p.reshape(out_shape), shifts.reshape(out_shape)


def reduce_quantized(node, method, axes):
    x_t, out_t = node.inputs[0], node.outputs[0]
    q = x_t.betensor
    if method in PASS_THROUGH:
        return reduce_float(method, q, axes, out_t.dtype)
    a = q.to(torch.int64) + int(x_t.zerop)
    if method in LOGICAL:
        return logical_reduce(method, a != 0, axes).to(torch.int64)
    rescale = Rescale.read(node)
    zp, lo, hi = out_t.zerop, out_t.qmin, out_t.qmax
    if method in ("SUM", "MEAN"):
        return rescale.apply(a.sum(axes, keepdim=True), zp, lo, hi)
    if method in ("L1", "L2"):
        sums = (a.abs() if method == "L1" else a * a).sum(axes, keepdim=True).clamp_(0, SUM_LIMIT)
        d = top_bits(sums)
        kept = (sums >> d).clamp_(0, (1 << SUM_KEPT_BITS) - 1)
        if method == "L1":
            return qmath.requantize(kept, rescale.multiplier, rescale.shift - d, zp, lo, hi)
        index = qmath.requantize(kept, rescale.multiplier, rescale.shift - d, 0, 0, (1 << SUM_KEPT_BITS) - 1)
        table, dtype = fields.read_lut(node, "sqrt_lut")
        return qmath.lut_lookup(index, table, SUM_KEPT_BITS, dtype.bits, dtype.is_signed)
    if method == "PROD":
        signed = int(torch.as_tensor(x_t.qmin + x_t.zerop).min()) < 0
        p, shifts = prod_quantized(a, axes, signed)
        return qmath.requantize(p, torch.full_like(p, rescale.multiplier), rescale.shift - shifts, zp, lo, hi)
    # VARIANCE: float32 on q, as the tool chain computes it
    qf = q.to(torch.float32).contiguous()
    mean = torch.mean(qf, dim=axes, keepdim=True).round()
    return rescale.apply(torch.sum((qf - mean) ** 2, dim=axes, keepdim=True), zp, lo, hi)


@op_register(OpType.Reduce, "1.0")
def reduce_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    method = reduce_method(self)
    axes = reduce_axes(self, x_t.betensor.dim())
    if self.quantized:
        out = QT.store_output(self, reduce_quantized(self, method, axes), out_t)
    else:
        x = x_t.betensor if method in PASS_THROUGH else computing_float(x_t.betensor)
        out = reduce_float(method, x, axes, out_t.dtype)
    if not self.get_param("keepdims", True):
        out = out.reshape([s for d, s in enumerate(out.shape) if d not in axes])
    out_t.betensor = out
    return out


# ---- quantize ---------------------------------------------------------------------
def wide_rescale(ratio: float) -> Rescale:
    m, s = qmath.scale_approximation(ratio, WIDE_MULTIPLIER_BITS, shift_ceil=WIDE_SHIFT_CEIL)
    return Rescale(m, s, fields.multiplier_dtype(WIDE_MULTIPLIER_BITS), fields.shift_dtype(s))


def prod_rescale(ratio_log2: float) -> Rescale:
    """M * 2^-s = 2^ratio_log2 (a ratio possibly beyond float range), M of 15 bits."""
    shift = math.floor(math.log2((1 << WIDE_MULTIPLIER_BITS) - 1) - ratio_log2)
    m = math.floor(2.0 ** (ratio_log2 + shift) + 0.5)
    return Rescale(m, shift, fields.multiplier_dtype(WIDE_MULTIPLIER_BITS), fields.shift_dtype(shift))


def check_sum_bound(node, bound: int) -> None:
    """L1/L2 sums saturate at 2^32 - 1: refuse inputs whose sums could reach it."""
    if bound > SUM_LIMIT:
        raise QT.Unsupported(f"layer '{node.name}' (Reduce): the sum can reach {bound}, past the "
                             f"tool chain's uint32 accumulator")


def quantize_logical(out) -> None:
    QT.set_quantization(out, 1.0, 0, 0, 255, 8, False)
    out.qinvariant = True


def quantize_l2_lut(node, x, out, s_p: float) -> None:
    """sqrt_lut: 2^k entries (k = min(input bits, lut_items_in_bits)) over the 16-bit
    index P = s_p * sum x^2, entry i the quantized sqrt(P / s_p) at P = i * 2^(16 - k)."""
    k = min(x.qbits, settings_of(node).lut_items_in_bits)
    p = torch.arange(1 << k, dtype=torch.float64) * (1 << (SUM_KEPT_BITS - k))
    table = qmath.quantize(torch.sqrt(p / s_p).to(torch.float32), out.scale, out.zerop, out.qmin, out.qmax)
    fields.write_lut(node, table, out.dtype, "sqrt_lut")


@quant_register(OpType.Reduce, "1.0")
def reduce_quantize(self, *args):
    method = reduce_method(self)
    if method in PASS_THROUGH:
        QT.pass_through(self)
        return
    QT.check_quantized_inputs(self)
    x, out = self.inputs[0], self.outputs[0]
    if x.qinvariant or x.is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (Reduce): {method} of an unscaled or per-channel input")
    if method in LOGICAL:
        quantize_logical(out)
        return
    axes = axis_list(self, "axis", len(x.ir_shape))
    n = reduced_count(self, x.ir_shape, axes)
    if n < 1:
        raise IRError(f"layer '{self.name}' (Reduce): {method} over a single element")
    unsigned = method in ("L1", "L2", "VARIANCE", "UNBIASED_VARIANCE")
    QT.quantize_activation(self, out, signed=False if unsigned else None)
    s_in, s_out = float(x.scale), float(out.scale)
    if method in ("SUM", "MEAN"):
        ratio = s_out / s_in / (n if method == "MEAN" else 1)
        Rescale.from_ratio(ratio, settings_of(self).multiplier_bits).write(self)
    elif method == "L1":
        check_sum_bound(self, n * QT.shifted_absmax(x))
        wide_rescale(s_out / s_in).write(self)
    elif method == "L2":
        check_sum_bound(self, n * QT.shifted_absmax(x) ** 2)
        # P, the 16-bit sum of squares, spans the squared output range
        hi = (out.qmax + out.zerop) / s_out
        s_p = ((1 << SUM_KEPT_BITS) - 1) / max(hi * hi, qmath.FLOAT32_EPS)
        rescale = wide_rescale(s_p / (s_in * s_in))
        rescale.write(self)
        quantize_l2_lut(self, x, out, s_p)
    elif method == "PROD":
        prod_rescale(math.log2(s_out) - n * math.log2(s_in)).write(self)
    else:
        wide_rescale(s_out / (s_in * s_in) / n).write(self)
