"""Integer primitives of the quantized forward: the one place where rounding,
saturation, rescaling, lookup tables and exact integer products are defined.

The arithmetic is the tool chain's (what the Compass Optimizer's forward
computes on a quantized IR; docs/integer-semantics.md is the normative text):

* q = round(f * scale - zp), f = (q + zp) / scale (the IR's convention; scale
  is steps per unit, float32).
* Rounding is round half to even everywhere (ties to the even integer), as
  the tool chain's requantization does.
* A rescale by a multiplier M and a shift s is round(x * M * 2^-s), taken in
  float64: exact while |x * M| < 2^53, which every 8/16-bit layer stays far
  below. Negative shifts are left shifts.
* Quantizing a float (graph inputs, Quantize layers) is done in float32:
  round(fl32(fl32(scale * f) - zp)), NaN gives 0, +-inf saturate.
"""
import math
from typing import Tuple

import torch

from ..errors import QuantizeError

EXACT_FLOAT32 = 1 << 24   # every integer of magnitude <= 2^24 is a float32
EXACT_FLOAT64 = 1 << 53
FLOAT32_EPS = float(torch.finfo(torch.float32).eps)
EMPTY_RANGE = 1e-30


# ---- float <-> integer ------------------------------------------------------
def quantize(f: torch.Tensor, scale, zp, qmin, qmax) -> torch.Tensor:
    """clamp(round_half_even(fl32(fl32(scale * f) - zp)), qmin, qmax) as float32
    holding integers; NaN gives 0. `scale`/`zp`/bounds may be tensors
    broadcastable to `f` (per channel)."""
    f = f.to(torch.float32)
    s = _f32(scale, f.device)
    z = _f32(zp, f.device)
    y = (s * f - z).round_()  # in place from here: a decoder's embedding table is 113 MB a copy
    y.clamp_(_f32(qmin, f.device), _f32(qmax, f.device))
    return torch.nan_to_num_(y, nan=0.0)


def dequantize(q: torch.Tensor, scale, zp) -> torch.Tensor:
    """f = (q + zp) * (1 / scale) in float32."""
    z = _f32(zp, q.device)
    return (q.to(torch.float32) + z) * (1.0 / _f32(scale, q.device))


def _f32(v, device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(device=device, dtype=torch.float32)
    return torch.tensor(float(v), dtype=torch.float32, device=device)


def _f64(v, device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(device=device, dtype=torch.float64)
    return torch.tensor(float(v), dtype=torch.float64, device=device)


_SCRATCH = {}


def scratch(shape, dtype, device, slot: str) -> torch.Tensor:
    """A reusable buffer (uninitialised) of `shape`: large fresh tensors cost page
    faults on every batch, so big temporaries live here. The buffer of one slot is
    overwritten by the next request for that slot."""
    numel = math.prod(int(d) for d in shape)
    key = (slot, dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        _SCRATCH[key] = buf
    return buf[:numel].view(tuple(shape))


# ---- rescale ------------------------------------------------------------------
def shift_factor(multiplier, shift, device=None):
    """M * 2^-shift as a float64 (tensor): exact for |M| < 2^53 and shifts in [-1000, 1000]."""
    if isinstance(multiplier, torch.Tensor) or isinstance(shift, torch.Tensor):
        m, s = torch.broadcast_tensors(_f64(multiplier, device), torch.as_tensor(shift, device=device).to(torch.int64))
        return torch.ldexp(m, -s)
    return _f64(math.ldexp(float(multiplier), -int(shift)), device)


def requantize(x: torch.Tensor, multiplier, shift, zp, qmin, qmax, out: torch.Tensor = None) -> torch.Tensor:
    """clamp(round_half_even(x * M * 2^-shift) - zp, qmin, qmax) in float64 (a tensor
    holding integers). M, shift, zp and the bounds are numbers or tensors broadcastable
    to x (per channel: along the axis the caller shaped them for). `out` may be x
    itself when x is a float64 tensor the caller owns (computed in place)."""
    dev = x.device
    factor = shift_factor(multiplier, shift, dev)
    if out is None:
        y = torch.mul(x.to(torch.float64), factor)
    else:
        y = torch.mul(x, factor, out=out)
    y.round_()
    if isinstance(zp, torch.Tensor) or zp != 0:
        y.sub_(_f64(zp, dev))
    if _scalar(qmin) and _scalar(qmax):
        return y.clamp_(float(qmin), float(qmax))
    return torch.clamp(y, _f64(qmin, dev), _f64(qmax, dev), out=y)


def _scalar(v) -> bool:
    return not isinstance(v, torch.Tensor) or v.numel() == 1


def scale_approximation(ratio, mult_bits: int, limit: bool = False, mult_bits_ceil: int = 15,
                        shift_ceil: int = 31, force_shift_positive: bool = False):
    """Integers (M, shift) with M * 2^-shift ~= ratio, M of at most min(mult_bits,
    mult_bits_ceil) bits: shift = min(floor(log2((2^bits - 1) / ratio)), shift_ceil)
    (and <= bits when `limit`), M = floor(ratio * 2^shift + 1/2). Computed in
    float32 exactly as the tool chain does, since some layers (AVG pooling) derive
    their multiplier at run time from the float32 scales in the IR. A ratio that
    is exactly 1 everywhere gives (1, 0). `force_shift_positive` turns negative
    shifts into 0 with the largest multiplier. Works on a number or a tensor
    (per channel); returns ints or int64 tensors."""
    r = ratio.to(torch.float32) if isinstance(ratio, torch.Tensor) else torch.tensor(float(ratio), dtype=torch.float32)
    bits = min(int(mult_bits), int(mult_bits_ceil))
    top = torch.tensor(2.0 ** bits - 1.0, dtype=torch.float32)
    shift = torch.floor(torch.log2(top / r))
    if limit:
        shift = torch.minimum(shift, torch.tensor(float(bits)))
    shift = torch.minimum(shift, torch.tensor(float(shift_ceil)))
    mult = torch.floor(r * torch.pow(torch.tensor(2.0), shift) + 0.5)
    if force_shift_positive:
        negative = shift < 0
        shift = torch.where(negative, torch.zeros_like(shift), shift)
        mult = torch.where(negative, torch.full_like(mult, min(2.0 ** mult_bits - 1.0, 2.0 ** mult_bits_ceil - 1.0)), mult)
    if (mult - torch.pow(torch.tensor(2.0), shift)).abs().max().item() < FLOAT32_EPS:
        mult, shift = torch.ones_like(mult), torch.zeros_like(shift)
    if not bool(torch.isfinite(mult).all()) or not bool(torch.isfinite(shift).all()):
        raise QuantizeError(f"rescale ratio {ratio} has no multiplier/shift approximation")
    if r.dim() == 0:
        return int(mult.item()), int(shift.item())
    return mult.to(torch.int64), shift.to(torch.int64)


def unify_shifts(multipliers: torch.Tensor, shifts: torch.Tensor, max_multiplier: int = 32767):
    """Per-channel (M, shift) pairs rewritten with one common shift, as the NPU's
    per-channel rescale needs: shift = max(0, max shifts), M << (shift - shift_c),
    then both reduced together until every M <= max_multiplier."""
    shift = max(0, int(shifts.max()))
    m = multipliers.to(torch.int64) << (shift - shifts.to(torch.int64))
    ratio = float(m.max()) / max_multiplier
    if ratio > 1.0:
        down = math.ceil(math.log2(ratio))
        shift -= down
        m = m >> down
    return m, torch.full_like(m, shift)


def clear_low_bits(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Integers q (float64) with the low bits zeroed that bring their range within a signed
    `bits`-bit one: l = ceil(max(log2(max(q, 1) / qmax), log2(min(q, -1) / qmin))), then
    floor(q / 2^l) * 2^l (the tool chain's compression of biases for AIFF)."""
    if not q.numel():
        return q
    lo, hi = integer_range(bits, True)
    low = math.ceil(max(math.log2(max(float(q.max()), 1.0) / hi), math.log2(min(float(q.min()), -1.0) / lo)))
    return torch.floor(q * 2.0 ** -low) * 2.0 ** low if low > 0 else q


# ---- quantization parameters ------------------------------------------------
def integer_range(bits: int, signed: bool, full_range: bool = True) -> Tuple[int, int]:
    if not signed:
        return 0, (1 << bits) - 1
    hi = (1 << (bits - 1)) - 1
    return (-hi - 1 if full_range else -hi), hi


def linear_quant_params(lo, hi, bits: int, symmetric: bool, full_range: bool, signed: bool):
    """(scale, zp, qmin, qmax) for float range [lo, hi] (numbers or per-channel
    tensors), in the tool chain's convention q = round(f * scale - zp):

    * symmetric: zp = 0, scale = (qmax - qmin) / max(|lo|, |hi|), the range
      doubled when signed;
    * asymmetric: scale = (qmax - qmin) / (hi - lo), zp = round(lo * scale) - qmin
      (so q(lo) = qmin), kept within [-(2^(bits-1) - 1), 2^(bits-1) - 1];
    * an empty range (narrower than 1e-30) gets scale 1. (The tool chain's own
      quantizer already treats ranges narrower than float32's epsilon as empty, which
      zeroes models whose activations are that small; npuopt resolves them.)

    scale is float32 (returned as a Python float, or a float32 tensor per channel)."""
    qmin, qmax = integer_range(bits, signed, full_range or not symmetric)
    per_channel = isinstance(lo, torch.Tensor) and lo.numel() > 1 or isinstance(hi, torch.Tensor) and hi.numel() > 1
    lo_t = torch.as_tensor(lo, dtype=torch.float32).reshape(-1)
    hi_t = torch.as_tensor(hi, dtype=torch.float32).reshape(-1)
    q_range = torch.tensor(float(qmax - qmin), dtype=torch.float32)
    if symmetric:
        f_range = torch.maximum(lo_t.abs(), hi_t.abs())
        if signed:
            f_range = f_range * 2.0
        zfactor = torch.zeros_like(f_range)
        zoffset = 0.0
    else:
        f_range = hi_t - lo_t
        zfactor = lo_t
        zoffset = float(qmin)
    f_range = torch.where((f_range < EMPTY_RANGE) | torch.isnan(f_range), q_range, f_range)
    scale = q_range / f_range
    limit = (1 << (bits - 1)) - 1
    zp = torch.clamp(torch.round(scale * zfactor) - zoffset, -limit, limit).to(torch.int64)
    if per_channel:
        return scale, zp, qmin, qmax
    return float(scale.item()), int(zp.item()), qmin, qmax


# ---- lookup tables ----------------------------------------------------------
def lut_lookup(index: torch.Tensor, lut: torch.Tensor, index_bits: int, out_bits: int,
               out_signed: bool) -> torch.Tensor:
    """Look integer `index` (0 <= index < 2^index_bits) up in a table of 2^k entries
    (int64 result). With b = index_bits - k > 0: i = index >> b, r = index - (i << b),
    out = lut[i] + ((lut[i+1] - lut[i]) * r) >> b, where the entry past the end
    repeats the last one (floor shift: the interpolation rounds down); with b <= 0
    the index is used directly. The result is clamped to the table dtype's range."""
    n = lut.numel()
    k = n.bit_length() - 1
    if (1 << k) != n:
        raise QuantizeError(f"lookup table has {n} entries, not a power of two")
    table = lut.reshape(-1).to(device=index.device, dtype=torch.int64)
    table = torch.cat([table, table[-1:]])
    idx = index.to(torch.int64)
    b = index_bits - k
    if b > 0:
        i = idx >> b
        r = idx - (i << b)
        out = table[i] + (((table[i + 1] - table[i]) * r) >> b)
    else:
        out = table[idx]
    lo, hi = integer_range(out_bits, out_signed)
    return out.clamp_(lo, hi)


# ---- exact integer products -------------------------------------------------
def _chunks(l1: torch.Tensor, x_absmax: int, limit: int):
    """Split the input-channel axis of per-(out, in-channel) L1 norms `l1` [O, C]
    into the fewest equal chunks with max_o sum_{c in chunk} l1[o, c] * x_absmax < limit.
    Every partial sum of a chunk's dot product is then below `limit` in magnitude."""
    c = l1.shape[1]
    if c == 0:
        return [(0, 0)]
    if float(l1.max()) * x_absmax >= limit:
        raise QuantizeError("exact integer product impossible in float32: one channel's bound exceeds 2^24")
    for n in range(1, c + 1):
        size = -(-c // n)
        bounds = [(i, min(i + size, c)) for i in range(0, c, size)]
        worst = max(float(l1[:, a:b].sum(dim=1).max()) for a, b in bounds)
        if worst * x_absmax < limit:
            return bounds
    return [(i, i + 1) for i in range(c)]


class ConvPlan:
    """What exact_conv2d derives from integer OIHW weights once: float copies, the
    L1 bounds and the channel chunks (cache it while the weights do not change)."""

    def __init__(self, w: torch.Tensor, x_absmax: int, device_type: str):
        self.wf = w.to(torch.float32).contiguous()
        l1 = self.wf.abs().sum(dim=(2, 3)).to(torch.float64)          # [O, cin_g]
        self.bound = x_absmax * float(l1.sum(dim=1).max()) if l1.numel() else 0.0
        self.float64 = device_type != "cpu" or (l1.numel() > 0 and float(l1.max()) * x_absmax >= EXACT_FLOAT32)
        if self.float64:
            if self.bound >= EXACT_FLOAT64:
                raise QuantizeError("exact integer convolution bound exceeds 2^53")
            self.w64 = w.to(torch.float64)
            self.chunks = None
        else:
            self.chunks = _chunks(l1.cpu(), x_absmax, EXACT_FLOAT32)
            self.parts = [self.wf[:, a:b].contiguous() for a, b in self.chunks]


def exact_conv2d(x: torch.Tensor, x_absmax: int, stride, dilation, groups: int,
                 plan: ConvPlan) -> torch.Tensor:
    """Exact sum_k w*x of an integer-valued, already padded NCHW `x` (|x| <= x_absmax)
    and the plan's OIHW weights, as a float tensor holding the exact integers
    (float32 when below 2^24, else float64).

    On CPU: float32 convolutions over chunks of input channels (per group) such that
    max|x| * sum|w| over a chunk < 2^24 for every output channel, hence every partial
    sum in any order of accumulation is an exactly represented integer; chunks are
    added in float64 (exact below 2^53). NNPACK (Winograd/FFT) is disabled. On other
    devices (cuDNN may use TF32, Winograd or FFT), and on CPU when one channel alone
    passes 2^24, the product is taken in float64 (bound < 2^53 asserted) and rounded
    to the nearest integer, which removes any algorithmic error (far below 0.5).
    """
    import torch.nn.functional as F
    if plan.float64:
        out = F.conv2d(x.to(torch.float64), plan.w64, None, stride, 0, dilation, groups)
        return torch.round_(out)
    cin_g = plan.wf.shape[1]
    xf = x if x.dtype == torch.float32 else x.to(torch.float32)
    with torch.backends.nnpack.flags(enabled=False):
        if len(plan.chunks) == 1:
            return F.conv2d(xf, plan.wf, None, stride, 0, dilation, groups)
        acc = None  # chunk c of every group: channels g*cin_g + [a, b)
        for (a, b), wpart in zip(plan.chunks, plan.parts):
            xpart = xf[:, a:b] if groups == 1 else xf.index_select(
                1, torch.cat([torch.arange(g * cin_g + a, g * cin_g + b) for g in range(groups)]).to(x.device))
            part = F.conv2d(xpart, wpart, None, stride, 0, dilation, groups)
            acc = part.to(torch.float64) if acc is None else acc.add_(part)
        return acc


def exact_matmul(a: torch.Tensor, b: torch.Tensor, a_absmax: int = None, bound: float = None) -> torch.Tensor:
    """Exact a @ b (torch.matmul broadcasting) of integer-valued tensors, as float64
    holding the integers.

    `bound` must be >= a_absmax * max_j sum_k |b[..., k, j]|, which bounds every partial
    sum of every output whatever the order of summation (callers with a constant b
    pass it, cached; otherwise it is computed from a_absmax and b). Below 2^24 one
    float32 matmul is exact, below 2^53 one float64 matmul (any blocking, any FMA: no
    operation rounds); beyond, int64 products and sums (slow). Off CPU, where float32
    may run as TF32, float64 is used and rounded."""
    if bound is None:
        if a_absmax is None:
            a_absmax = int(a.abs().max()) if a.numel() else 0
        col_l1 = b.abs().to(torch.float64).sum(dim=-2)
        bound = float(a_absmax) * (float(col_l1.max()) if col_l1.numel() else 0.0)
    if bound >= EXACT_FLOAT64:
        return (a.to(torch.int64).unsqueeze(-1) * b.to(torch.int64).unsqueeze(-3)).sum(dim=-2).to(torch.float64)
    if a.device.type != "cpu":
        return torch.round(torch.matmul(a.to(torch.float64), b.to(torch.float64)))
    dtype = torch.float32 if bound < EXACT_FLOAT32 else torch.float64
    return torch.matmul(a.to(dtype), b.to(dtype)).to(torch.float64)


def l1_bound(w: torch.Tensor, x_absmax: int) -> float:
    """max over output channels of x_absmax * sum|w[o]|: bounds |sum w*x| (w: [O, ...])."""
    return float(w.abs().to(torch.float64).reshape(w.shape[0], -1).sum(dim=1).max()) * x_absmax if w.numel() else 0.0


# ---- fixed-point functions (LayerNorm's inverse square root, Softmax's FAST_EXP) ----
# The tool chain's fixed-point helpers work on a value normalized into [2^30, 2^31)
# and read small tables; the tables are these formulas (they equal the tool chain's
# entry for entry, and are what a quantized IR stores as `lut`/`log2_lut`/`pow2_lut`).
ISQRT_TABLE = torch.tensor([min(32767, math.floor(32768 / math.sqrt(1 + i / 64) + 0.5)) for i in range(193)])
LOG2_TABLE = torch.tensor([math.floor(math.log2(1 + i / 256) * 32768 + 0.5) for i in range(256)])
POW2_TABLE = torch.tensor([math.floor(2 ** (i / 256) * 32768 + 0.5) for i in range(256)])
SQRT2_Q30 = math.floor(2 ** 30.5 + 0.5)


def normalize_q30(v: torch.Tensor):
    """(v << n, n) with n the left shifts (at most 30) that bring v into [2^30, 2^31):
    0 for v >= 2^30, 30 for v <= 1 (int64 tensors)."""
    v = v.to(torch.int64)
    _, bit_length = torch.frexp(v.clamp(min=1).to(torch.float64))  # exact below 2^53; beyond, n is 0 anyway
    n = (31 - bit_length.to(torch.int64)).clamp_(0, 30)
    return v << n, n


def inverse_sqrt(v: torch.Tensor) -> torch.Tensor:
    """~2^31 / sqrt(v) for 0 <= v < 2^31 (v = 0 gives 2^31 - 2^16), the tool chain's
    integer form: normalize v = m * 2^e (m in [2^30, 2^31)), halve m when e is odd,
    i = index of m's top bits in ISQRT_TABLE (entry i = 2^15 / sqrt(1 + i/64)),
    interpolate linearly on the next 15 bits, shift right by (e - 1) // 2."""
    if v.numel() and (int(v.min()) < 0 or int(v.max()) >= 1 << 31):
        raise QuantizeError(f"inverse square root of {int(v.max())}: outside [0, 2^31)")
    m, n = normalize_q30(v)
    e = 31 - n
    m = torch.where((e & 1) == 1, m >> 1, m) >> 7
    e = (e - 1) >> 1
    i = ((m >> 16) - 64).clamp_(min=0)
    frac = (m >> 1) & 0x7FFF
    table = ISQRT_TABLE.to(v.device)
    y0 = table[i]
    return ((y0 << 16) - (((y0 - table[i + 1]) * frac) << 1)) >> e


def pow2_fixed(x: torch.Tensor, in_frac_bits: int, out_frac_bits: int) -> torch.Tensor:
    """2^(x / 2^in_frac_bits) * 2^out_frac_bits for x <= 0, the tool chain's form: the
    fraction's top 8 bits index POW2_TABLE (entry i = 2^15 * 2^(i/256), no
    interpolation), (entry << 15) >> (30 - out_frac_bits - integer part); shifts of 64
    or more (or negative) give 0, as torch's int64 shift does. in_frac_bits >= 8."""
    x = x.to(torch.int64)
    whole = x >> in_frac_bits
    i = (x & ((1 << in_frac_bits) - 1)) >> (in_frac_bits - 8)
    return (POW2_TABLE.to(x.device)[i] << 15) >> (30 - out_frac_bits - whole)


def log2_fixed(x: torch.Tensor, in_frac_bits: int, out_frac_bits: int) -> torch.Tensor:
    """log2(x / 2^in_frac_bits) * 2^out_frac_bits for x >= 1, the tool chain's form:
    normalize x (n left shifts), LOG2_TABLE at the next 8 bits (entry i =
    2^15 * log2(1 + i/256), no interpolation), (entry << 15) >> (30 - out_frac_bits),
    minus (n - 30 + in_frac_bits) << out_frac_bits."""
    m, n = normalize_q30(x)
    y = (LOG2_TABLE.to(x.device)[(m >> 22) & 0xFF] << 15) >> (30 - out_frac_bits)
    return y - ((n - (30 - in_frac_bits)) << out_frac_bits)


def log2_coarse(x: torch.Tensor, in_frac_bits: int, out_frac_bits: int) -> torch.Tensor:
    """The integer part of log2(x / 2^in_frac_bits), scaled by 2^out_frac_bits, plus 1
    when out_frac_bits > 0 and the normalized x passes 2^30.5 (Softmax FAST_EXP with
    adjust_q 0 or 1)."""
    m, n = normalize_q30(x)
    half = (m > SQRT2_Q30).to(torch.int64) if out_frac_bits else torch.zeros_like(m)
    return half - ((n - (30 - in_frac_bits)) << out_frac_bits)
