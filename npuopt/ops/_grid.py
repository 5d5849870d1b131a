"""What GridSample's float and integer forwards share (sampling the map at per-axis
integer taps, blending along x, then y, then z), its integer forms as the tool chain's
forward computes a quantized layer, and its quantize function (the two forms:
gridsample.py's docstring, docs/integer-semantics.md)."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import read_lut, set_constant

TABLE_BITS = 8          # a grid of at most 8 bits is looked up: 2^8 entries, indexed by code + 128
TABLE_SHIFT = 10        # the tables' fraction bits
COORDINATE_BITS = 16    # the scaled form's coordinates are int16
AXES = ("x", "y", "z")


def denormalized(g: torch.Tensor, size: int, align: bool) -> torch.Tensor:
    """Grid coordinates (float32) in pixels of an axis of `size`."""
    return (g + 1) / 2.0 * (size - 1) if align else ((g + 1) * size - 1) / 2.0


def taps(x: torch.Tensor, index, padding: str, fill) -> torch.Tensor:
    """x[n, index...] for per-axis integer indices [N, points...] (in the map's axis order),
    outside the map `fill` (ZEROS) or clamped (BORDER)."""
    sizes = x.shape[1:-1]
    inside = torch.ones_like(index[0], dtype=torch.bool)
    clamped = []
    for i, size in zip(index, sizes):
        inside = inside & (i >= 0) & (i <= size - 1)
        clamped.append(torch.clamp(i, 0, size - 1))
    n = torch.arange(x.shape[0], device=x.device).reshape((-1,) + (1,) * (index[0].dim() - 1))
    v = x[(n, *clamped)]
    if padding == "ZEROS":
        v = torch.where(inside.unsqueeze(-1), v, torch.full_like(v, fill))
    return v


def interpolate(x, lows, padding: str, fill, blend):
    """Taps low and low + 1 along every axis (the map's order: (z,) y, x), blended along x
    first, then y (then z): blend(a, b, axis)."""
    def along(axis, fixed):
        if axis == len(lows):
            return taps(x, [lo + b for lo, b in zip(lows, fixed)], padding, fill)
        return blend(along(axis + 1, fixed + (0,)), along(axis + 1, fixed + (1,)), axis)
    return along(0, ())


def _shift(node, axis: str) -> int:
    key = f"coordinate_{axis}_shift"
    value = node.get_param(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 30:
        raise IRError(f"layer '{node.name}' (GridSample): quantized, but {key} {value!r} is not an integer in [1, 30]")
    return value


def _ints(node, key: str, count: int) -> list:
    value = node.get_param(key)
    if not isinstance(value, (list, tuple)) or len(value) != count or \
            any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
        raise IRError(f"layer '{node.name}' (GridSample): quantized, but {key} {value!r} is not {count} "
                      f"non-negative integers")
    return list(value)


def _looked_up(node, name: str, index: torch.Tensor) -> torch.Tensor:
    table, _ = read_lut(node, name)
    if table.numel() != 1 << TABLE_BITS:
        raise IRError(f"layer '{node.name}' (GridSample): constant '{name}' has {table.numel()} entries, "
                      f"expected {1 << TABLE_BITS}")
    return table.to(index.device)[index]


def uses_tables(rank: int, grid_bits: int) -> bool:
    """Whether the tool chain's forward reads the tables form (else the scaled one)."""
    return rank == 2 and grid_bits <= TABLE_BITS


def int_grid_sample(node, method: str, padding: str, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """The output integers (before the top's clamp); x holds q of the map, grid q of the grid."""
    x_t, grid_t = node.inputs
    q = x.to(torch.int64)
    fill = -int(x_t.zerop)
    rank = q.dim() - 2
    axes = AXES[:rank][::-1]          # the map's axis order: (z,) y, x
    shifts = [_shift(node, a) for a in axes]
    g = grid.to(torch.int64)
    if uses_tables(rank, grid_t.dtype.bits):
        code = g + (1 << (TABLE_BITS - 1))
        lows = [_looked_up(node, f"lut{a}", code[..., AXES.index(a)]) for a in axes]
        if method == "NEAREST":
            return taps(q, lows, padding, fill)
        fracs = [_looked_up(node, f"{a}_terp", code[..., AXES.index(a)]).unsqueeze(-1) for a in axes]
    else:
        mults, rshifts = _ints(node, "scale_value", rank), _ints(node, "shift_value", rank)
        g = g + int(grid_t.zerop)
        coords = []
        for k, a in enumerate(axes):
            i = AXES.index(a)
            c = ((g[..., i] * mults[i]) >> rshifts[i]) + (q.shape[1 + k] - 1) * (1 << (shifts[k] - 1))
            coords.append(torch.clamp(c, -(1 << 15), (1 << 15) - 1))
        if method == "NEAREST":
            return taps(q, [torch.clamp(c + (1 << (s - 1)), -(1 << 15), (1 << 15) - 1) >> s
                               for c, s in zip(coords, shifts)], padding, fill)
        lows = [c >> s for c, s in zip(coords, shifts)]
        fracs = [(c - (lo << s)).unsqueeze(-1) for c, lo, s in zip(coords, lows, shifts)]
    return interpolate(q, lows, padding, fill, lambda a, b, k: a + (((b - a) * fracs[k]) >> shifts[k]))


def _signed_bits(lo: float, hi: float) -> int:
    """The fewest bits of a signed integer range holding [lo, hi]."""
    bits = 1
    while not (-(2.0 ** (bits - 1)) <= lo and hi <= 2.0 ** (bits - 1) - 1):
        bits += 1
    return bits


def quantize_grid_sample(node, method: str, padding: str, align: bool) -> None:
    """The top keeps the map's quantization. A 4-D layer with a signed grid of at most 8 bits
    gets tables over the 256 grid codes (coordinates clamped into the map first with BORDER;
    NEAREST the rounded pixel, BILINEAR floor and the fraction in Q10, rounded); any other
    its coordinate shifts 16 - (bits of the coordinates' integer range) and 15-bit
    multipliers of 2^shift (size or size - 1 with align_corners) / (2 scale of the grid)."""
    QT.check_quantized_inputs(node)
    x, grid = node.inputs
    out = node.outputs[0]
    QT.copy_quantization(x, out)
    out.qmin, out.qmax = out.dtype.qmin, out.dtype.qmax
    sizes = list(x.ir_shape[1:-1])
    rank = len(sizes)
    axes = AXES[:rank]
    codes = torch.arange(grid.dtype.qmin, grid.dtype.qmax + 1, dtype=torch.float32)
    values = qmath.dequantize(codes, grid.scale, grid.zerop)
    coords = {a: denormalized(values, sizes[rank - 1 - i], align) for i, a in enumerate(axes)}
    if uses_tables(rank, grid.dtype.bits):
        if not grid.dtype.is_signed:
            raise QT.Unsupported(f"layer '{node.name}' (GridSample): the tool chain looks up an 8-bit grid by "
                                 f"code + 128, which an unsigned grid overflows; kept in float")
        _tables(node, method, padding, coords, sizes)
        return
    mults, shifts = [], []
    for i, a in enumerate(axes):
        size = sizes[rank - 1 - i]
        shift = COORDINATE_BITS - _signed_bits(float(coords[a].min()), float(coords[a].max()))
        m, s = qmath.scale_approximation(2.0 ** shift * (size - 1 if align else size) / (2 * float(grid.scale)), 15)
        if shift < 1 or s < 0:
            raise QT.Unsupported(f"layer '{node.name}' (GridSample): an axis of {size} leaves the int16 coordinates "
                                 f"no fraction bits; kept in float")
        mults.append(m)
        shifts.append(s)
        node.params[f"coordinate_{a}_shift"] = shift
    node.params["scale_value"], node.params["scale_type"] = mults, [Dtype.UINT16.value] * rank
    node.params["shift_value"], node.params["shift_type"] = shifts, [Dtype.INT8.value] * rank


def _tables(node, method: str, padding: str, coords: dict, sizes) -> None:
    for i, a in enumerate(AXES[:2]):
        c = coords[a]
        if padding == "BORDER":
            c = torch.clamp(c, 0, sizes[1 - i] - 1)
        low = torch.round(c) if method == "NEAREST" else torch.floor(c)
        set_constant(node, f"lut{a}", torch.clamp(low, -(1 << 15), (1 << 15) - 1), Dtype.INT16)
        if method == "BILINEAR":
            set_constant(node, f"{a}_terp", torch.round((c - low) * (1 << TABLE_SHIFT)), Dtype.UINT16)
        node.params[f"coordinate_{a}_shift"] = TABLE_SHIFT
    node.params["scale_value"], node.params["scale_type"] = [1, 1], [Dtype.UINT8.value] * 2
    node.params["shift_value"], node.params["shift_type"] = [0, 0], [Dtype.INT8.value] * 2
