"""Lookup tables and broadcasting by the Compass Optimizer's names, on npuopt.quant.qmath."""
from typing import Union

import torch

from ..errors import NpuoptError
from ..quant import qmath
from .dtype_utils import bits2range

__all__ = ["lookup_lut_powerof2", "lookup_float_index_lut", "broadcasting_transform", "calculate_inverse_sqrt"]


def lookup_lut_powerof2(inputs, lut, lut_in_bits, in_is_signed, lut_out_bits, out_is_signed, is_float=False,
                        align_mode=None):
    """Look `inputs` (lut_in_bits wide, signed or not) up in a table of 2^N entries: the
    index is inputs - qmin; its top N bits pick the entry, the low bits interpolate
    linearly towards the next one (the entry past the end repeats the last). Integer
    tables give int64 clamped to the lut_out_bits range (interpolation rounded down,
    qmath.lut_lookup); float tables interpolate exactly. `align_mode` is accepted and,
    as in the Compass Optimizer, changes nothing."""
    n = lut.numel()
    if n == 0 or (1 << (n.bit_length() - 1)) != n:
        raise NpuoptError(f"lookup_lut_powerof2: the table has {n} entries, not a power of two")
    in_qmin, _ = bits2range(lut_in_bits, in_is_signed)
    index = inputs.to(torch.int64) - in_qmin
    if not is_float:
        return qmath.lut_lookup(index, lut, int(lut_in_bits), int(lut_out_bits), bool(out_is_signed))
    table = lut.reshape(-1).to(device=index.device, dtype=torch.float32)
    table = torch.cat([table, table[-1:]])
    frac_bits = max(int(lut_in_bits) - (n.bit_length() - 1), 0)
    i = index >> frac_bits
    r = (index - (i << frac_bits)).to(torch.float32)
    return table[i] + (table[i + 1] - table[i]) * r / float(1 << frac_bits)


def lookup_float_index_lut(t: torch.Tensor, lut: torch.Tensor, index_scale: float, index_offset: Union[float, int],
                           mirror_mode: bool = False, value_offset_for_mirror_mode: Union[float, int] = 0.0):
    """Linear interpolation of a float table at the float index t * index_scale -
    index_offset (NaN reads as 0); outside [0, size - 1] the end segments extend
    linearly. In mirror mode, negative indexes read the table at -index, negated, and
    value_offset_for_mirror_mode is subtracted from every result."""
    table = lut.reshape(-1).to(t.device)
    size = table.numel()
    x = torch.nan_to_num(t, nan=0.0) * index_scale - index_offset

    def lookup(v):
        pos = v.clamp(0, size - 1)
        i = pos.floor().long()
        nxt = torch.cat([table, table[-1:]])[i + 1]
        y = table[i] + (nxt - table[i]) * (v - i)
        below = table[0] + (table[1] - table[0]) * v
        above = table[-1] + (table[-1] - table[-2]) * (v - (size - 1))
        return torch.where(v < 0, below, torch.where(v > size - 1, above, y))

    if not mirror_mode:
        return lookup(x)
    return torch.where(x >= 0, lookup(x), -lookup(-x)) - value_offset_for_mirror_mode


def broadcasting_transform(x0: torch.Tensor, x1: torch.Tensor):
    """Both tensors tiled to a common shape (NumPy broadcasting, and whole multiples)."""
    dims = max(x0.dim(), x1.dim())
    a = x0.reshape([1] * (dims - x0.dim()) + list(x0.shape))
    b = x1.reshape([1] * (dims - x1.dim()) + list(x1.shape))
    tile_a, tile_b = [1] * dims, [1] * dims
    for d in range(dims):
        na, nb = a.shape[d], b.shape[d]
        if na != nb and nb % na == 0:
            tile_a[d] = nb // na
        elif na != nb and na % nb == 0:
            tile_b[d] = na // nb
    return a.tile(tile_a), b.tile(tile_b)


def calculate_inverse_sqrt(x: torch.Tensor) -> torch.Tensor:
    """~2^31 / sqrt(x) for integers 0 <= x < 2^31 (qmath.inverse_sqrt)."""
    return qmath.inverse_sqrt(x)
