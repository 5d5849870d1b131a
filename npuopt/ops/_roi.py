"""What the ROI layers (RoiAlign, PyramidROIAlign) share: their params, and the
bilinear samples of an NHWC map on a grid of sample points per box, gathered for many
boxes at once (boxes in chunks, so hundreds of boxes with 7x7 or 14x14 bins and 2x2
samples per bin take a fraction of a second).

A sample reads four taps of its box's map, each given as a flat pixel index y * W + x
and a weight. The tool chain's forwards read the map flattened, so a tap left of or
above the map (x = -1 or y = -1) reads the pixel that many places before, from the
end of the map for the first row: the index is taken modulo H * W (`wrapped`)."""
from typing import Callable

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ._layout import param_choice

CHUNK_ELEMENTS = 1 << 23     # gathered values held at once (boxes are taken in chunks)


def int_pair(node, key: str, positive: bool = True, default=None) -> tuple:
    """A param of two integers (> 0 when `positive`, else any), as a tuple."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0) for v in value):
        what = "positive integers" if positive else "integers"
        raise IRError(f"layer '{node.name}' ({node.type}): {key} {value!r} must be two {what}")
    return tuple(value)


def number_list(node, key: str, count: int, default=None) -> list:
    """A param of `count` positive numbers."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if not isinstance(value, (list, tuple)) or len(value) != count or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in value):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} {value!r} must be {count} positive numbers")
    return [float(v) for v in value]


def half_pixel(node, default: str) -> bool:
    """coordinate_transformation_mode: HALF_PIXEL (True) or OUTPUT_HALF_PIXEL (False)."""
    mode = param_choice(node, "coordinate_transformation_mode", ["HALF_PIXEL", "OUTPUT_HALF_PIXEL"], default)
    return mode == "HALF_PIXEL"


def check_inputs(node, count: int) -> None:
    if len(node.inputs) != count:
        raise IRError(f"layer '{node.name}' ({node.type}): takes {count} inputs, got {len(node.inputs)}")


def quantized_inputs(node, count: int, read_without_zero_point: int = None, what: str = "input") -> None:
    """A quantize function's preamble: `count` inputs, all quantized; the tool chain's
    integer form reads input `read_without_zero_point`'s stored integers without its zero
    point, so one that has a zero point keeps the layer in float."""
    check_inputs(node, count)
    QT.check_quantized_inputs(node)
    if read_without_zero_point is not None and int(node.inputs[read_without_zero_point].zerop) != 0:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): {what} has zero point "
                             f"{int(node.inputs[read_without_zero_point].zerop)}; the integer form reads its "
                             f"stored integers without one")


def check_map(node, x: torch.Tensor, what: str = "input 0") -> None:
    if x.dim() != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): {what} must be an NHWC feature map, "
                      f"got shape {list(x.shape)}")


def shifted_int(t) -> torch.Tensor:
    """A = q + zp of a quantized per-tensor input, as int64."""
    return t.betensor.to(torch.int64) + int(t.zerop)


def wrapped(index: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Flat pixel indices modulo H * W (a tap left of or above the map reads the flattened
    map before its place, as the tool chain's forwards do)."""
    return torch.remainder(index, h * w)


def gather_reduce(fm: torch.Tensor, batch: torch.Tensor, index: torch.Tensor, weight: torch.Tensor,
                  combine: Callable, *per_box: torch.Tensor) -> torch.Tensor:
    """For each box r and output point p: combine(values, weights, *per_box) over its
    samples, where values[r, p, s, t, c] = fm[batch[r]] at flat pixel index[r, p, s, t]
    (tap t of sample s), weights is `weight` [R, P, S, T] with a channel axis, and per_box
    are further tensors of the same boxes (a sample mask...), cut to the chunk. fm is
    [N, H, W, C]; the result is [R, P, C] (float64 for an integer fm). Boxes are taken in
    chunks of at most CHUNK_ELEMENTS values."""
    n, h, w, c = fm.shape
    flat = fm.reshape(n * h * w, c)
    r, p, s, t = index.shape
    out = torch.empty((r, p, c), dtype=fm.dtype if fm.is_floating_point() else torch.float64, device=fm.device)
    step = max(1, CHUNK_ELEMENTS // max(1, p * s * t * c))
    for lo in range(0, r, step):
        hi = min(r, lo + step)
        rows = index[lo:hi] + (batch[lo:hi] * (h * w)).reshape(-1, 1, 1, 1)
        values = flat.index_select(0, rows.reshape(-1)).reshape(hi - lo, p, s, t, c)
        out[lo:hi] = combine(values, weight[lo:hi].unsqueeze(-1), *(e[lo:hi] for e in per_box))
    return out


def gather_sum(fm: torch.Tensor, batch: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """gather_reduce's weighted sum over every tap of every sample, as one batched matrix
    product per chunk; an integer map in float32 where every partial sum stays below 2^24,
    else in float64 (exact: integers below 2^53)."""
    if not fm.is_floating_point():
        bound = int(fm.abs().max()) * int(weight.abs().max()) * weight[0, 0].numel() if fm.numel() and \
            weight.numel() else 0
        fm = fm.to(torch.float32 if bound < qmath.EXACT_FLOAT32 else torch.float64)
    return gather_reduce(fm, batch, index, weight.to(fm.dtype), _weighted_sum)


def _weighted_sum(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    r, p, s, t, c = values.shape
    return torch.einsum("rpkc,rpk->rpc", values.reshape(r, p, s * t, c), weight.reshape(r, p, s * t))


def corner_grid(y_lo, y_hi, x_lo, x_hi, w: int):
    """Flat indices [R, ph, pw, Sy, Sx, 4] of the four taps (y_lo, x_lo), (y_lo, x_hi),
    (y_hi, x_lo), (y_hi, x_hi) from per-axis indices [R, ph, Sy] and [R, pw, Sx]."""
    ys = [v[:, :, None, :, None] for v in (y_lo, y_hi)]
    xs = [v[:, None, :, None, :] for v in (x_lo, x_hi)]
    return torch.stack([ys[0] * w + xs[0], ys[0] * w + xs[1], ys[1] * w + xs[0], ys[1] * w + xs[1]], -1)


def corner_weights(wy_lo, wy_hi, wx_lo, wx_hi, product: Callable = torch.mul):
    """Weights [R, ph, pw, Sy, Sx, 4] of the four taps, product(wy, wx) of per-axis ones."""
    ys = [v[:, :, None, :, None] for v in (wy_lo, wy_hi)]
    xs = [v[:, None, :, None, :] for v in (wx_lo, wx_hi)]
    return torch.stack([product(ys[0], xs[0]), product(ys[0], xs[1]), product(ys[1], xs[0]),
                        product(ys[1], xs[1])], -1)


def flat_samples(t: torch.Tensor) -> torch.Tensor:
    """[R, ph, pw, Sy, Sx, 4] -> [R, ph * pw, Sy * Sx, 4]."""
    r, ph, pw, sy, sx, k = t.shape
    return t.reshape(r, ph * pw, sy * sx, k)


def sample_mask(grid: torch.Tensor, largest: int) -> torch.Tensor:
    """[R, largest]: whether sample g of each box exists (g < its grid)."""
    return torch.arange(largest, device=grid.device).reshape(1, -1) < grid.reshape(-1, 1)


def largest_grid(grid: torch.Tensor) -> int:
    """The most samples of a box along an axis, at least 1 (the samples a box lacks are masked)."""
    return max(1, int(grid.max())) if grid.numel() else 1


def batch_of(rois_batch: torch.Tensor, n: int):
    """(index, valid) of each box's batch entry: the tool chain skips a box whose batch
    index is negative or past the batch (its output stays 0)."""
    valid = (rois_batch >= 0) & (rois_batch <= n - 1)
    return torch.where(valid, rois_batch, torch.zeros_like(rois_batch)).to(torch.int64), valid


def ceil_int(v: torch.Tensor) -> torch.Tensor:
    return torch.ceil(v).to(torch.int64)


def loop_points(lo, hi, scale: float, bins: int, ratio: int, half_pixel: bool):
    """The tool chain's sample points along one axis of each box, in float32 in its order
    of operations: start = lo * scale - offset (1/2 with HALF_PIXEL), extent = end - start
    (at least 1 without HALF_PIXEL), step = extent / bins, samples `ratio` or ceil(step),
    bin = step / samples, point ((step * i + start) + bin / 2) + bin * g. Returns (start,
    end, grid, points [R, bins, G], the samples that exist [R, bins, G])."""
    offset = 0.5 if half_pixel else 0.0
    start = lo * torch.tensor(scale, dtype=torch.float32) - offset
    end = hi * torch.tensor(scale, dtype=torch.float32) - offset
    extent = end - start if half_pixel else torch.clamp(end - start, min=1.0)
    step = extent / bins
    grid = torch.full_like(start, ratio, dtype=torch.int64) if ratio > 0 else ceil_int(step)
    width = step / grid.float()
    g = torch.arange(largest_grid(grid), dtype=torch.float32, device=lo.device)
    i = torch.arange(bins, dtype=torch.float32, device=lo.device)
    c = ((step[:, None, None] * i[None, :, None] + start[:, None, None]) + (width / 2)[:, None, None]) + \
        width[:, None, None] * g[None, None, :]
    return start, end, grid, c, sample_mask(grid, g.numel())[:, None, :].expand(c.shape)
