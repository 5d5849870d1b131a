"""RoiAlign: for each box r of input 1 ([R, 5]: batch index, y1, x1, y2, x2), the
pooled_shape [ph, pw] bins of input 0 (an NHWC map) over the box scaled by
spatial_scale_value [sy, sx], each the AVG (or MAX) of sample_h x sample_w bilinear
samples ([0, 0]: ceil(bin size) per box). Top [R, ph, pw, C]. As the tool chain's float
forward, with coordinates in float32 in its order of operations:

* AVG, sy == sx, sample_h == sample_w, OUTPUT_HALF_PIXEL: torchvision's roi_align
  (aligned=False): box sizes at least 1, a sample outside [-1, H] x [-1, W] counts 0,
  one before 0 reads 0, the mean over max(samples, 1);
* otherwise the tool chain's own loop (`local`): HALF_PIXEL subtracts 1/2, a box ending
  past the map or reversed gives 0, samples are not clamped at 0 (a tap at -1 reads the
  flattened map, _roi.wrapped), AVG divides by the samples (0/0 for a box without any),
  MAX takes the largest weighted tap.

Quantized (docs/integer-semantics.md, RoiAlign): integer box corners (spatial scales in
Q`spatial_shift_value`), integer tap weights; see _roi_int.py."""
from dataclasses import dataclass

import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _roi
from . import _roi_int as RI
from ._layout import param_choice

FLOAT32_MIN = float(torch.finfo(torch.float32).min)


@dataclass(frozen=True)
class RoiParams:
    pooled: tuple        # (ph, pw)
    spatial: tuple       # (sy, sx): floats, or Q(spatial_shift) integers when quantized
    sample: tuple        # (sh, sw): <= 0 adaptive
    method: str          # AVG, MAX
    half_pixel: bool

    @property
    def torchvision_like(self) -> bool:
        return self.method == "AVG" and self.spatial[0] == self.spatial[1] and \
            self.sample[0] == self.sample[1] and not self.half_pixel


def roi_params(node) -> RoiParams:
    spatial = _roi.int_pair(node, "spatial_scale_value") if node.quantized else \
        tuple(_roi.number_list(node, "spatial_scale_value", 2, [1.0, 1.0]))
    return RoiParams(_roi.int_pair(node, "pooled_shape"), spatial,
                     _roi.int_pair(node, "sample", positive=False, default=[0, 0]),
                     param_choice(node, "method", ["AVG", "MAX"], "AVG"), _roi.half_pixel(node, "HALF_PIXEL"))


def check_rois(node, x: torch.Tensor, rois: torch.Tensor) -> None:
    _roi.check_map(node, x)
    if rois.dim() != 2 or rois.shape[1] != 5:
        raise IRError(f"layer '{node.name}' ({node.type}): input 1 must hold boxes [R, 5] (batch index, y1, "
                      f"x1, y2, x2), got shape {list(rois.shape)}")


# ---- float ------------------------------------------------------------------------------
def _torchvision_axis(lo, hi, scale: float, bins: int, ratio: int, size: int):
    """Per-axis taps as torchvision computes them in float32 (the box corners scaled in
    float64 first, as its double spatial_scale makes them)."""
    start = (lo.double() * scale).float()
    extent = torch.clamp((hi.double() * scale).float() - start, min=1.0)
    width = extent / bins
    grid = torch.full_like(start, ratio, dtype=torch.int64) if ratio > 0 else _roi.ceil_int(width)
    g = torch.arange(_roi.largest_grid(grid), dtype=torch.float32, device=lo.device)
    i = torch.arange(bins, dtype=torch.float32, device=lo.device)
    c = (start[:, None, None] + i[None, :, None] * width[:, None, None]) + \
        ((g + 0.5)[None, None, :] * width[:, None, None]) / grid.float()[:, None, None]
    inside = (c >= -1.0) & (c <= size) & _roi.sample_mask(grid, g.numel())[:, None, :]
    c = torch.clamp(c, min=0.0)
    low = c.to(torch.int64)
    top = low >= size - 1
    low = torch.where(top, torch.full_like(low, size - 1), low)
    c = torch.where(top, low.float(), c)
    frac = c - low.float()
    zero = torch.zeros_like(frac)
    return low, torch.where(top, low, low + 1), torch.where(inside, 1.0 - frac, zero), \
        torch.where(inside, frac, zero), grid, torch.ones_like(start, dtype=torch.bool), inside


def _local_axis(lo, hi, scale: float, bins: int, ratio: int, size: int, half_pixel: bool):
    """Per-axis taps of the tool chain's own loop, in float32."""
    start, end, grid, c, inside = _roi.loop_points(lo, hi, scale, bins, ratio, half_pixel)
    keep = (end >= start) & (end <= size)
    low = torch.floor(torch.where(inside, c, torch.zeros_like(c))).to(torch.int64)
    top = low >= size - 1
    frac = torch.where(top, torch.zeros_like(c), c - low.float())
    low = torch.where(top, torch.full_like(low, size - 1), low)
    zero = torch.zeros_like(frac)
    return low, torch.where(top, low, low + 1), torch.where(inside, 1.0 - frac, zero), \
        torch.where(inside, frac, zero), grid, keep, inside


def float_roi_align(x: torch.Tensor, rois: torch.Tensor, p: RoiParams) -> torch.Tensor:
    n, h, w, c = x.shape
    r32 = rois.to(torch.float32)
    batch, valid = _roi.batch_of(r32[:, 0], n)
    (ph, pw), (sh, sw), (sy, sx) = p.pooled, p.sample, p.spatial
    if p.torchvision_like:
        ys = _torchvision_axis(r32[:, 1], r32[:, 3], sy, ph, sh, h)
        xs = _torchvision_axis(r32[:, 2], r32[:, 4], sx, pw, sw, w)
    else:
        ys = _local_axis(r32[:, 1], r32[:, 3], sy, ph, sh, h, p.half_pixel)
        xs = _local_axis(r32[:, 2], r32[:, 4], sx, pw, sw, w, p.half_pixel)
    valid = valid & ys[5] & xs[5]
    index = _roi.wrapped(_roi.corner_grid(ys[0], ys[1], xs[0], xs[1], w), h, w)
    weight = _roi.corner_weights(*(v.to(x.dtype) for v in (ys[2], ys[3], xs[2], xs[3])))
    keep = (ys[6][:, :, None, :, None] & xs[6][:, None, :, None, :]).reshape(len(rois), ph * pw, -1)
    index, weight = _roi.flat_samples(index), _roi.flat_samples(weight)
    if p.method == "AVG":
        count = ys[4] * xs[4]
        count = torch.clamp(count, min=1) if p.torchvision_like else count
        out = _roi.gather_sum(x, batch, index, weight)
        out = out / count.to(out.dtype).reshape(-1, 1, 1)
    else:
        out = _roi.gather_reduce(x, batch, index, weight, _largest, keep)
    out = torch.where(valid.reshape(-1, 1, 1), out, torch.zeros_like(out))
    return out.reshape(len(rois), ph, pw, c)


def _largest(v, wt, keep):
    """The largest weighted tap over a bin's samples (float32's lowest without any)."""
    products = (v * wt).amax(3)
    return products.masked_fill(~keep.unsqueeze(-1), FLOAT32_MIN).amax(2)


@op_register(OpType.RoiAlign, "1.0")
def roialign_forward(self, *args):
    _roi.check_inputs(self, 2)
    x_t, rois_t = self.inputs
    check_rois(self, x_t.betensor, rois_t.betensor)
    p = roi_params(self)
    out_t = self.outputs[0]
    if not self.quantized:
        out_t.betensor = float_roi_align(x_t.betensor, rois_t.betensor, p)
        return out_t.betensor
    y = RI.int_roi_align(self, p, _roi.shifted_int(x_t), _roi.shifted_int(rois_t))
    return QT.store_output(self, torch.clamp(y - out_t.zerop, out_t.qmin, out_t.qmax), out_t)


@quant_register(OpType.RoiAlign, "1.0")
def roialign_quantize(self, *args):
    _roi.check_inputs(self, 2)
    RI.quantize_roi_align(self, roi_params(self))
