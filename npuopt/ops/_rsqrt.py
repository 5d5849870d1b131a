"""The tool chain's product by an inverse square root held in 15 bits, which
Normalization L2 and EmbeddingLookupSparse SQRTN share (docs/integer-semantics.md,
"Normalization"): r ~ 2^(31 - t) / sqrt(S) from the isqrt table, x * M shifted down to 16
bits by `reciprocal_shift_value` p, times r, the result rescaled by 2^-(s + 31 - p - t)."""
import math

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant.fields import Shift

PRODUCT_BITS = 16       # x * M is shifted right until it fits 16 bits
RSQRT_BITS = 15         # the inverse square root kept in 15 bits
RSQRT_SHIFT = 31        # inverse_sqrt(S) ~ 2^31 / sqrt(S)
ISQRT_INPUT_BITS = 31


def ceil_log2_f32(v: torch.Tensor) -> torch.Tensor:
    return torch.ceil(torch.log2(v.to(torch.float32))).to(torch.int64)


def rsqrt_15(s: torch.Tensor):
    """(r, t): r ~ 2^(31 - t) / sqrt(S) held in 15 bits, the tool chain's form for any
    S >= 0 (sums beyond 31 bits shifted down by an even count first)."""
    _, bit_length = torch.frexp(s.clamp(min=1).to(torch.float64))
    over = (bit_length.to(torch.int64) - ISQRT_INPUT_BITS).clamp(min=0)
    over = over + (over & 1)
    r = qmath.inverse_sqrt(s >> over)
    shift = (ceil_log2_f32(r) - RSQRT_BITS).clamp(min=0)
    return (r >> shift).clamp(0, (1 << RSQRT_BITS) - 1), shift - over // 2


def times_rsqrt(x: torch.Tensor, multiplier, p: int, squares: torch.Tensor):
    """(y, e): y = clamp32(clamp16(clamp32(x * M) >> p) * r) with r ~ 2^(31 - t) / sqrt(S)
    of the sums of squares S (broadcasting against x), and e = 31 - p - t, the shift that
    takes y to x * M / sqrt(S)."""
    lo32, hi32 = qmath.integer_range(32, True)
    lo16, hi16 = qmath.integer_range(PRODUCT_BITS, True)
    rsq, t = rsqrt_15(squares)
    y = ((x * multiplier).clamp(lo32, hi32) >> p).clamp(lo16, hi16)
    return (y * rsq).clamp(lo32, hi32), RSQRT_SHIFT - p - t


def write_reciprocal_shift(node, in_bits: int, multiplier: int) -> None:
    """`reciprocal_shift_value` p: how far x * M (x of `in_bits` bits) passes 16 bits; and
    the isqrt table `lut` (int16) the tool chain's reader looks r up in."""
    scale_bits = math.ceil(float(torch.log2(torch.tensor(float(multiplier), dtype=torch.float32))))
    Shift(max(0, in_bits + scale_bits - PRODUCT_BITS), Dtype.INT8).write(node, "reciprocal_")
    fields.write_lut(node, qmath.ISQRT_TABLE, Dtype.INT16)
