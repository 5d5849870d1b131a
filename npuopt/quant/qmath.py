"""Integer primitives of the quantized forward: the one place where rounding,
saturation, rescaling, lookup tables and exact integer products are defined.

Conventions (docs/integer-semantics.md is the normative text):

* q = round(f * scale - zp), f = (q + zp) / scale  (the IR's convention).
* Rounding is "round half up" everywhere: round(x) = floor(x + 0.5), so ties go
  towards +inf (-2.5 -> -2, 2.5 -> 3), like a hardware adder of 2^(s-1)
  followed by an arithmetic right shift. torch.round (half to even) is never used.
* Integer tensors are int64 while computing; a layer's output is cast to its
  dtype's torch type after saturation.
"""
import math
from typing import Tuple, Union

import torch

from ..errors import QuantizeError

EXACT_FLOAT32 = 1 << 24   # every integer of magnitude <= 2^24 is a float32
EXACT_FLOAT64 = 1 << 53


# ---- float <-> integer ------------------------------------------------------
def round_half_up(x: torch.Tensor) -> torch.Tensor:
    """floor(x + 0.5), in x's float dtype."""
    return torch.floor(x + 0.5)


def quantize(f: torch.Tensor, scale, zp, qmin: int, qmax: int, out_dtype=torch.int64) -> torch.Tensor:
    """q = clamp(floor(f*scale - zp + 0.5), qmin, qmax), computed in float32 with the
    operations in this order (mul, sub, add 0.5, floor) so a NumPy float32 program
    reproduces it bit for bit. `scale`/`zp` may be per-channel tensors already
    broadcastable to `f`."""
    f = f.to(torch.float32)
    s = scale.to(torch.float32) if isinstance(scale, torch.Tensor) else torch.tensor(float(scale), dtype=torch.float32)
    z = zp.to(torch.float32) if isinstance(zp, torch.Tensor) else torch.tensor(float(zp), dtype=torch.float32)
    t = torch.floor(f * s.to(f.device) - z.to(f.device) + 0.5)
    t = torch.nan_to_num(t, nan=0.0, posinf=float(qmax), neginf=float(qmin))
    return t.clamp_(qmin, qmax).to(out_dtype)


def dequantize(q: torch.Tensor, scale, zp) -> torch.Tensor:
    """f = (q + zp) / scale in float32."""
    s = scale.to(torch.float32) if isinstance(scale, torch.Tensor) else float(scale)
    z = zp.to(q.device) if isinstance(zp, torch.Tensor) else int(zp)
    return (q.to(torch.int64) + z).to(torch.float32) / s


def saturate(x: torch.Tensor, qmin: int, qmax: int) -> torch.Tensor:
    return x.clamp(qmin, qmax)


def rounding_right_shift(acc: torch.Tensor, shift) -> torch.Tensor:
    """(acc + 2^(shift-1)) >> shift, arithmetic (floor) shift, for shift >= 1;
    shift == 0 leaves acc unchanged; shift < 0 is a left shift by -shift.
    `shift` is an int or an int tensor broadcastable to acc (per channel)."""
    acc = acc.to(torch.int64)
    if isinstance(shift, torch.Tensor):
        shift = shift.to(device=acc.device, dtype=torch.int64)
        right = shift.clamp(min=0)
        left = (-shift).clamp(min=0)
        half = torch.where(right > 0, torch.ones_like(right) << (right - 1).clamp(min=0), torch.zeros_like(right))
        return ((acc << left) + half) >> right
    shift = int(shift)
    if shift > 0:
        return (acc + (1 << (shift - 1))) >> shift
    if shift < 0:
        return acc << (-shift)
    return acc


# ---- multipliers ----------------------------------------------------------
MAX_SHIFT = 62
MIN_SHIFT = -16


def multiplier_and_shift(ratio, bits: int = 15):
    """Integers (M, shift) with M / 2^shift ~= ratio and 2^(bits-1) <= |M| < 2^bits.

    M = round_half_up(|ratio| * 2^shift) with shift = bits - 1 - floor(log2 |ratio|),
    renormalised when rounding reaches 2^bits, so |M/2^shift - ratio| <= 2^-(shift+1)
    <= |ratio| * 2^-bits. The sign of ratio is carried by M. shift is limited to
    [MIN_SHIFT, MAX_SHIFT]: a tiny ratio gets a smaller M (possibly 0), a huge one
    saturates M at 2^bits - 1. ratio == 0 gives (0, 0).
    Works on a float or a 1-D tensor (per channel); returns ints or int64 tensors.
    """
    if isinstance(ratio, torch.Tensor):
        pairs = [multiplier_and_shift(float(r), bits) for r in ratio.detach().cpu().double().tolist()]
        return (torch.tensor([p[0] for p in pairs], dtype=torch.int64),
                torch.tensor([p[1] for p in pairs], dtype=torch.int64))
    r = float(ratio)
    if not math.isfinite(r):
        raise QuantizeError(f"rescale ratio {r} is not finite")
    if r == 0.0:
        return 0, 0
    sign = -1 if r < 0 else 1
    a = abs(r)
    mant, exp = math.frexp(a)           # a = mant * 2^exp, 0.5 <= mant < 1
    shift = bits - exp                  # a * 2^shift in [2^(bits-1), 2^bits)
    shift = max(MIN_SHIFT, min(MAX_SHIFT, shift))
    m = math.floor(math.ldexp(a, shift) + 0.5)
    if m >= (1 << bits):
        if shift > MIN_SHIFT and m == (1 << bits):
            m, shift = 1 << (bits - 1), shift - 1
        else:
            m = (1 << bits) - 1
    return sign * int(m), int(shift)


def requantize(acc: torch.Tensor, M, shift, zp_out, qmin: int, qmax: int) -> torch.Tensor:
    """clamp(rounding_right_shift(acc * M, shift) - zp_out, qmin, qmax), int64."""
    if isinstance(M, torch.Tensor):
        M = M.to(device=acc.device, dtype=torch.int64)
    y = rounding_right_shift(acc.to(torch.int64) * M, shift)
    return (y - int(zp_out)).clamp_(qmin, qmax)


EXACT_PRODUCT = 1 << 52


def _as_f64(v, device):
    return torch.as_tensor(v, dtype=torch.float64, device=device)


_SCRATCH = {}


def scratch(shape, dtype, device, slot: str) -> torch.Tensor:
    """A reusable buffer (uninitialised) of `shape`: large fresh tensors cost page
    faults on every layer, so the quantized forward's temporaries live here. The
    buffer of one slot is overwritten by the next request for that slot."""
    numel = 1
    for d in shape:
        numel *= int(d)
    key = (slot, dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        _SCRATCH[key] = buf
    return buf[:numel].view(tuple(shape))


def requantize_exact(acc: torch.Tensor, M, shift, bias=None, zp_out: int = 0,
                     bound: float = None, slot: str = "requantize") -> torch.Tensor:
    """rounding_right_shift((acc + bias) * M, shift) - zp_out, elementwise, for an
    integer-valued `acc` (int dtype, or float holding exact integers); M, shift and
    bias are ints or per-channel tensors broadcastable to acc (its last axis).
    No saturation here.

    Fast path, when `bound` >= max|acc| is given and
    (bound + max|bias|) * |M| * 2^max(0,-shift) + (|zp_out| + 1) * 2^shift < 2^52:
    float64 floor(acc * c + (bias * c + 0.5 - zp_out)) with c = M * 2^-shift
    (one addcmul and one floor). It is exact: every term is an integer multiple of
    2^-shift whose numerator stays below 2^53, so no float64 operation rounds.
    Returns float64 (holding the integers) in a reused scratch buffer (consume it
    before the next call); otherwise the int64 formula, int64.
    """
    device = acc.device
    if bound is not None:
        m_abs = float(M.abs().max()) if isinstance(M, torch.Tensor) else abs(float(M))
        s_min = int(shift.min()) if isinstance(shift, torch.Tensor) else int(shift)
        s_max = int(shift.max()) if isinstance(shift, torch.Tensor) else int(shift)
        b_abs = (float(bias.abs().max()) if isinstance(bias, torch.Tensor) and bias.numel()
                 else abs(float(bias or 0)))
        if ((bound + b_abs) * m_abs * 2.0 ** max(0, -s_min) + (abs(int(zp_out)) + 1) * 2.0 ** s_max
                < EXACT_PRODUCT):
            if isinstance(M, torch.Tensor) or isinstance(shift, torch.Tensor):
                c = torch.ldexp(_as_f64(M, device), -torch.as_tensor(shift, dtype=torch.int64, device=device))
            else:
                c = _as_f64(math.ldexp(float(M), -int(shift)), device)
            offset = 0.5 - int(zp_out)
            if bias is not None:
                offset = _as_f64(bias, device) * c + offset
            else:
                offset = torch.full_like(c, offset)
            buf = scratch(acc.shape, torch.float64, device, slot)
            buf.copy_(acc)
            return torch.addcmul(offset, buf, c, out=buf).floor_()
    a = acc.to(torch.int64)
    if bias is not None:
        a = a + torch.as_tensor(bias, dtype=torch.int64, device=device)
    if isinstance(M, torch.Tensor):
        M = M.to(device=device, dtype=torch.int64)
    return rounding_right_shift(a * M, shift) - int(zp_out)


def round_div(num: torch.Tensor, den) -> torch.Tensor:
    """round_half_up(num / den) for integer num and positive integer den:
    floor((2*num + den) / (2*den))."""
    return torch.div(2 * num + den, 2 * den, rounding_mode="floor")


def isqrt(v: torch.Tensor) -> torch.Tensor:
    """floor(sqrt(v)) of integers 0 <= v < 2^62, exactly (int64): R*R <= v < (R+1)*(R+1).
    A float64 square root is within 1 of the answer; integer comparisons correct it."""
    v = v.to(torch.int64)
    if v.numel() and (int(v.min()) < 0 or int(v.max()) >= 1 << 62):
        raise QuantizeError("isqrt needs integers in [0, 2^62)")
    r = torch.sqrt(v.to(torch.float64)).floor_().to(torch.int64)
    for _ in range(2):
        r = r - (r * r > v).to(torch.int64)
        r = r + ((r + 1) * (r + 1) <= v).to(torch.int64)
    return r


def even_normalize(v: torch.Tensor, limit_bits: int = 62):
    """(v * 4^j, j) for integers v >= 1, j the largest integer >= 0 with
    v * 4^j < 2^limit_bits (j = 0 when v is already at or beyond it): the left
    shift by an even amount 2j that brings v closest below 2^limit_bits, so that
    isqrt(v * 4^j) = sqrt(v) * 2^j keeps about limit_bits/2 significant bits."""
    v = v.to(torch.int64)
    if v.numel() and int(v.min()) < 1:
        raise QuantizeError("even_normalize needs integers >= 1")
    j = torch.zeros_like(v)
    step = 1 << ((limit_bits // 2).bit_length() - 1)
    while step:  # greedy binary search on the monotone test v * 4^(j + step) < 2^limit
        cand = j + step
        room = (limit_bits - 2 * cand).clamp(min=0)
        ok = (2 * cand <= limit_bits) & (v < (torch.ones_like(room) << room))
        j = torch.where(ok, cand, j)
        step >>= 1
    return v * (torch.ones_like(j) << (2 * j)), j


# ---- scale and zero point ---------------------------------------------------
def integer_range(bits: int, signed: bool, restricted: bool = False) -> Tuple[int, int]:
    if signed:
        hi = (1 << (bits - 1)) - 1
        return (-hi if restricted else -hi - 1), hi
    return 0, (1 << bits) - 1


def scale_zp_from_range(lo, hi, bits: int, symmetric: bool, restricted: bool = False,
                        signed: bool = None):
    """(scale, zp, qmin, qmax, signed) for values in [lo, hi] (floats or per-channel tensors).

    The range is first widened to include 0, so 0.0 is exactly representable.
    * asymmetric: unsigned, scale = (2^bits - 1) / (hi - lo), zp = round_half_up(lo * scale)
      (so q(lo) = 0); signed when asked: zp shifted by 2^(bits-1).
    * symmetric, lo >= 0 (unless signed=True): unsigned, zp = 0, scale = (2^bits - 1) / hi.
    * symmetric otherwise: signed, zp = 0, absmax = max(-lo, hi);
      restricted: scale = (2^(bits-1) - 1) / absmax, q in [-(2^(bits-1)-1), 2^(bits-1)-1];
      full:       scale = (2^bits - 1) / (2 * absmax), q in [-2^(bits-1), 2^(bits-1)-1].
    A zero-width range gets scale 1 (nothing to resolve).
    """
    per_channel = isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor)
    lo_t = torch.as_tensor(lo, dtype=torch.float64).clamp(max=0.0)
    hi_t = torch.as_tensor(hi, dtype=torch.float64).clamp(min=0.0)
    tiny = 1e-12
    if symmetric:
        if signed is None:
            signed = bool((lo_t < 0).any())
        if not signed:
            qmin, qmax = integer_range(bits, False)
            width = hi_t
            scale = torch.where(width > tiny, qmax / width.clamp(min=tiny), torch.ones_like(width))
            zp = torch.zeros_like(scale, dtype=torch.int64)
        else:
            qmin, qmax = integer_range(bits, True, restricted)
            absmax = torch.maximum(-lo_t, hi_t)
            levels = qmax if restricted else ((1 << bits) - 1) / 2.0
            scale = torch.where(absmax > tiny, levels / absmax.clamp(min=tiny), torch.ones_like(absmax))
            zp = torch.zeros_like(scale, dtype=torch.int64)
    else:
        signed = bool(signed)
        qmin, qmax = integer_range(bits, signed)
        width = hi_t - lo_t
        scale = torch.where(width > tiny, ((1 << bits) - 1) / width.clamp(min=tiny), torch.ones_like(width))
        # q = round(f*scale) - zp; zp = round(lo*scale) - qmin maps lo to qmin
        zp = torch.floor(lo_t * scale + 0.5).to(torch.int64) - qmin
    if not per_channel:
        return float(scale), int(zp), qmin, qmax, signed
    return scale.to(torch.float32).double(), zp, qmin, qmax, signed


# ---- lookup tables ----------------------------------------------------------
def lut_bits_for(in_bits: int, lut_items_in_bits: int) -> int:
    """A table never has more entries than the input has values."""
    return min(in_bits, lut_items_in_bits)


def build_lut(fn, in_scale: float, in_zp: int, in_qmin: int, in_bits: int, lut_bits: int,
              out_scale: float, out_zp: int, out_qmin: int, out_qmax: int) -> torch.Tensor:
    """Table of 2^lut_bits integers: entry i is the quantized fn at input code
    q_i = in_qmin + i * 2^(in_bits - lut_bits): clamp(round_half_up(fn(x_i)*out_scale - out_zp))
    with x_i = (q_i + in_zp) / in_scale. Computed in float64 (offline)."""
    step = 1 << (in_bits - lut_bits)
    codes = in_qmin + torch.arange(1 << lut_bits, dtype=torch.float64) * step
    x = (codes + in_zp) / in_scale
    y = fn(x)
    q = torch.floor(y * out_scale - out_zp + 0.5)
    q = torch.nan_to_num(q, nan=0.0, posinf=out_qmax, neginf=out_qmin)
    return q.clamp(out_qmin, out_qmax).to(torch.int64)


def lut_lookup(q: torch.Tensor, lut: torch.Tensor, in_qmin: int, in_bits: int) -> torch.Tensor:
    """Look q up in a table built by build_lut (int64 result).

    d = q - in_qmin; with k = in_bits - lut_bits: k == 0 -> lut[d]; else
    i = d >> k, r = d & (2^k - 1), j = clamp(i + 1, 1, len - 1),
    out = lut[i] + rounding_right_shift((lut[j] - lut[j - 1]) * r, k)
    (linear interpolation between entries, in integers; the last segment continues
    the slope of the one before it). The caller saturates the result.
    """
    lut = lut.to(device=q.device, dtype=torch.int64)
    n = lut.numel()
    lut_bits = n.bit_length() - 1
    if (1 << lut_bits) != n:
        raise QuantizeError(f"lookup table has {n} entries, not a power of two")
    k = in_bits - lut_bits
    d = q.to(torch.int64) - in_qmin
    if k <= 0:
        return lut[d.clamp(0, n - 1)]
    i = (d >> k).clamp(0, n - 1)
    r = d & ((1 << k) - 1)
    j = (i + 1).clamp(min=1, max=n - 1)
    return lut[i] + rounding_right_shift((lut[j] - lut[j - 1]) * r, k)


# ---- exact integer products -------------------------------------------------
def _abs_max_of_range(lo: int, hi: int) -> int:
    return max(abs(int(lo)), abs(int(hi)))


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


def exact_conv2d(x: torch.Tensor, w: torch.Tensor, x_absmax: int, stride, padding, dilation,
                 groups: int, plan: ConvPlan = None) -> torch.Tensor:
    """Exact sum_k w*x of integer-valued NCHW `x` and OIHW `w` (any dtype holding
    integers, |x| <= x_absmax), returned as a float tensor holding the exact
    integers (float32 when below 2^24, else float64).

    On CPU: float32 convolutions over chunks of input channels (per group) such that
    max|x| * sum|w| over a chunk < 2^24 for every output channel, hence every partial
    sum in any order of accumulation is an exactly represented integer; chunks are
    added in float64 (exact below 2^53). NNPACK (Winograd/FFT) is disabled. On other
    devices (cuDNN may use TF32, Winograd or FFT), and on CPU when one channel alone
    passes 2^24, the product is taken in float64 (bound < 2^53 asserted) and rounded
    to the nearest integer, which removes any algorithmic error (far below 0.5).
    """
    import torch.nn.functional as F
    plan = plan or ConvPlan(w, x_absmax, x.device.type)
    if plan.float64:
        out = F.conv2d(x.to(torch.float64), plan.w64, None, stride, padding, dilation, groups)
        return torch.round_(out)
    cin_g = plan.wf.shape[1]
    xf = x if x.dtype == torch.float32 else x.to(torch.float32)
    with torch.backends.nnpack.flags(enabled=False):
        if len(plan.chunks) == 1:
            return F.conv2d(xf, plan.wf, None, stride, padding, dilation, groups)
        acc = None  # chunk c of every group: channels g*cin_g + [a, b)
        for (a, b), wpart in zip(plan.chunks, plan.parts):
            xpart = xf[:, a:b] if groups == 1 else xf.index_select(
                1, torch.cat([torch.arange(g * cin_g + a, g * cin_g + b) for g in range(groups)]).to(x.device))
            part = F.conv2d(xpart, wpart, None, stride, padding, dilation, groups)
            acc = part.to(torch.float64) if acc is None else acc.add_(part)
        return acc


def conv_bound(w: torch.Tensor, x_absmax: int) -> float:
    """max over output channels of x_absmax * sum|w[o]|: bounds |sum w*x| (w: [O, ...])."""
    return float(w.abs().to(torch.float64).reshape(w.shape[0], -1).sum(dim=1).max()) * x_absmax if w.numel() else 0.0


def exact_matmul(a: torch.Tensor, b: torch.Tensor, a_absmax: int = None, bound: float = None) -> torch.Tensor:
    """Exact a @ b (torch.matmul broadcasting) of integer-valued tensors, as int64.

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
        return _int64_matmul(a, b)
    if a.device.type != "cpu":
        return torch.round(torch.matmul(a.to(torch.float64), b.to(torch.float64))).to(torch.int64)
    dtype = torch.float32 if bound < EXACT_FLOAT32 else torch.float64
    return torch.matmul(a.to(dtype), b.to(dtype)).to(torch.int64)


def _int64_matmul(a, b):
    """Slow and exact: for values too large for float64's 53 bits."""
    return (a.to(torch.int64).unsqueeze(-1) * b.to(torch.int64).unsqueeze(-3)).sum(dim=-2)


IntOrTensor = Union[int, torch.Tensor]
