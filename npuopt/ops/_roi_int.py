"""RoiAlign in integers, as the tool chain's forward computes a quantized layer, and its
quantize function (docs/integer-semantics.md, RoiAlign).

A = q + zp of both inputs; the box corner v (input 1) becomes a coordinate in
Q`spatial_shift_value` (ss) units of the map; the sample points are integers, each splits
into a pixel (>> ss) and a fraction; the four tap weights are integers; the bin's sum is
rescaled by scale_value[0]/shift_value[0] (+ ss). Two forms:

* sample_h, sample_w > 0: corner = trunc(fl32(v * M_r) * 2^-s_r) * spatial - half, with
  (M_r, s_r) = scale_value[1]/shift_value[1]; step = trunc(fl32(extent * M_b) * 2^-s_b)
  (bin_scale/bin_shift), bin = (step * M_g) >> s_g (grid_scale/grid_shift); sample
  y = step * i + start + bin * (2 g + 1); weights (d2 * d2') >> ss;
* otherwise (adaptive samples) exact divisions by ph * n * 2^ss instead of the
  multipliers, corner = trunc(fl32(v * spatial * M_r) * 2^-s_r) - half, weights
  round(fl32(d2 * d2') * 2^-ss) of half-fractions, the sum divided by n_s^2 * ph * pw.

A box whose batch index A is outside the map's batch, reversed, or ending past the map
gives 0 (before the output zero point)."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import multiplier_dtype, shift_dtype
from ..quant.settings import settings_of
from . import _roi

SPATIAL_SHIFT = 10       # the tool chain's default Q of the integer spatial scales
INDEX_BITS = 12          # its least multiplier bits of the 1/ph and 1/(2 sample) approximations


def _pair(node, key: str) -> tuple:
    value = node.get_param(key)
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise IRError(f"layer '{node.name}' ({node.type}): quantized, but {key} {value!r} is not two integers")
    return tuple(value)


def _scaled(v: torch.Tensor, multiplier: int, shift: int) -> torch.Tensor:
    """trunc(fl32(v * M) * 2^-s): an integer product taken to float32, then scaled."""
    return (v * multiplier).to(torch.float32).mul(2.0 ** -shift).to(torch.int64)


def _taps(c: torch.Tensor, size: int, ss: int):
    """(low, high, fraction) of integer sample points in Q(ss)."""
    low = c >> ss
    frac = c - (low << ss)
    top = low >= size - 1
    low = torch.where(top, torch.full_like(low, size - 1), low)
    return low, torch.where(top, low, low + 1), torch.where(top, torch.zeros_like(frac), frac)


def _corners(node, p, rois, spatial_shift, roi_rescale, adaptive):
    """The boxes' integer corners (y1, x1, y2, x2) and whether each is kept."""
    half = 1 << (spatial_shift - 1) if p.half_pixel else 0
    m, s = roi_rescale
    sy, sx = p.spatial
    if adaptive:
        c = [_scaled(rois[:, k] * sp, m, s) for k, sp in ((1, sy), (2, sx), (3, sy), (4, sx))]
    else:
        c = [_scaled(rois[:, k], m, s) * sp for k, sp in ((1, sy), (2, sx), (3, sy), (4, sx))]
    y1, x1, y2, x2 = (v - half for v in c)
    return y1, x1, y2, x2


def int_roi_align(node, p, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
    """The integers R (before the output zero point) of a quantized RoiAlign; x and rois
    are A = q + zp (int64)."""
    ss = node.get_param("spatial_shift_value")
    if isinstance(ss, bool) or not isinstance(ss, int) or not 1 <= ss <= 20:
        raise IRError(f"layer '{node.name}' ({node.type}): spatial_shift_value {ss!r} must be an integer in [1, 20]")
    (m_out, m_roi), (s_out, s_roi) = _pair(node, "scale_value"), _pair(node, "shift_value")
    adaptive = p.sample[0] <= 0 or p.sample[1] <= 0
    n, h, w, c = x.shape
    batch, valid = _roi.batch_of(rois[:, 0], n)
    y1, x1, y2, x2 = _corners(node, p, rois, ss, (m_roi, s_roi), adaptive)
    valid = valid & (x2 >= x1) & (y2 >= y1) & (x2 <= w << ss) & (y2 <= h << ss)
    extent = [y2 - y1, x2 - x1]
    if not p.half_pixel:
        extent = [torch.clamp(e, min=1 << ss) for e in extent]
    if adaptive:
        ys = _adaptive_axis(y1, extent[0], p.pooled[0], p.sample[0], h, ss)
        xs = _adaptive_axis(x1, extent[1], p.pooled[1], p.sample[1], w, ss)
    else:
        bins, grids = _pair(node, "bin_scale_value"), _pair(node, "grid_scale_value")
        bin_shifts, grid_shifts = _pair(node, "bin_shift_value"), _pair(node, "grid_shift_value")
        ys = _fixed_axis(y1, extent[0], p.pooled[0], p.sample[0], h, ss, (bins[0], bin_shifts[0]),
                         (grids[0], grid_shifts[0]))
        xs = _fixed_axis(x1, extent[1], p.pooled[1], p.sample[1], w, ss, (bins[1], bin_shifts[1]),
                         (grids[1], grid_shifts[1]))
    index = _roi.flat_samples(_roi.wrapped(_roi.corner_grid(ys[0], ys[1], xs[0], xs[1], w), h, w))
    if adaptive:
        weight = _roi.corner_weights(ys[2], ys[3], xs[2], xs[3], _rounded_weight(ss))
    else:
        weight = _roi.corner_weights(ys[2], ys[3], xs[2], xs[3], lambda a, b: (a * b) >> ss)
    weight = _roi.flat_samples(weight)
    keep = (ys[5][:, :, None, :, None] & xs[5][:, None, :, None, :]).reshape(index.shape[:3])
    total_shift = s_out + ss
    samples = (ys[4] * xs[4]).to(torch.float64).reshape(-1, 1, 1)
    per_box = samples * p.pooled[0] * p.pooled[1] if adaptive else torch.ones_like(samples)
    if p.method == "AVG":
        s = _roi.gather_sum(x, batch, index, weight)
        y = torch.round(s * m_out * 2.0 ** -total_shift / (per_box * samples if adaptive else per_box))
    else:
        y = _roi.gather_reduce(x, batch, index, weight, _largest(m_out * 2.0 ** -total_shift), keep, per_box)
    y = torch.nan_to_num(y, nan=0.0)
    y = torch.where(valid.reshape(-1, 1, 1), y, torch.zeros_like(y))
    return y.reshape(len(rois), p.pooled[0], p.pooled[1], c)


def _largest(scale: float):
    """Each sample's largest weighted tap, rescaled and rounded (then divided by n_s * ph * pw
    with adaptive samples, by 1 otherwise); the largest over the bin's samples."""
    def combine(v, wt, keep, per_box):
        r = torch.round((v * wt).amax(3).to(torch.float64) * scale / per_box.unsqueeze(-1))
        return r.masked_fill(~keep.unsqueeze(-1), -2.0 ** 31).amax(2)
    return combine


def _rounded_weight(ss: int):
    def product(a, b):
        return torch.round((a * b).to(torch.float32) * 2.0 ** -ss).to(torch.int64)
    return product


def _fixed_axis(start, extent, bins: int, ratio: int, size: int, ss: int, bin_rescale, grid_rescale):
    step = _scaled(extent, *bin_rescale)
    width = _shift_floor(step * grid_rescale[0], grid_rescale[1])
    i = torch.arange(bins, device=start.device).reshape(1, -1, 1)
    g = torch.arange(ratio, device=start.device).reshape(1, 1, -1)
    c = step.reshape(-1, 1, 1) * i + start.reshape(-1, 1, 1) + width.reshape(-1, 1, 1) * (2 * g + 1)
    low, high, frac = _taps(c, size, ss)
    one = 1 << ss
    grid = torch.full_like(start, ratio)
    return low, high, one - frac, frac, grid, torch.ones_like(c, dtype=torch.bool)


def _shift_floor(v: torch.Tensor, shift: int) -> torch.Tensor:
    return v >> shift if shift >= 0 else v << -shift


def _adaptive_axis(start, extent, bins: int, ratio: int, size: int, ss: int):
    unit = bins << ss
    step, step_mod = extent // unit, extent % unit
    grid = torch.full_like(extent, ratio) if ratio > 0 else step + (step_mod > 0).to(torch.int64)
    whole = torch.clamp(grid, min=1) * unit
    width = extent // whole
    width_mod = extent - width * whole
    scale1, scale2, scale3 = whole * 2, grid * 2, whole
    largest = _roi.largest_grid(grid)
    i = torch.arange(bins, device=start.device).reshape(1, -1, 1)
    g = torch.arange(largest, device=start.device).reshape(1, 1, -1)
    col = lambda v: v.reshape(-1, 1, 1)  # noqa: E731
    start_mod = col(step_mod) * i + col(start) * bins
    t1 = col(scale2) * start_mod + col(scale3 * width + width_mod) + 2 * col(width_mod) * g
    t2 = torch.div(t1, col(scale1), rounding_mode="trunc")
    low = col(step) * i + col(width) * g + t2
    d1 = t1 - t2 * col(scale1)
    top = low >= size - 1
    low = torch.where(top, torch.full_like(low, size - 1), low)
    d1 = torch.where(top, torch.zeros_like(d1), d1)
    d2 = col(scale1) - d1
    keep = _roi.sample_mask(grid, largest)[:, None, :].expand(low.shape)
    d1, d2 = (torch.where(keep, torch.div(d, 2, rounding_mode="trunc"), torch.zeros_like(d)) for d in (d1, d2))
    return low, torch.where(top, low, low + 1), d2, d1, grid, keep


def quantize_roi_align(node, p) -> None:
    """As the tool chain: the top takes input 0's quantization; the multipliers of 1/ph,
    1/pw (bin_*) and 1/(2 sample) (grid_*) of max(12, bits) bits, of 1/scale of the boxes
    (their bits), of the average 1/(sample_h * sample_w) (1 with adaptive samples); the
    spatial scales in Q10."""
    QT.check_quantized_inputs(node)
    x, rois = node.inputs
    out = node.outputs[0]
    QT.copy_quantization(x, out)
    out.qmin, out.qmax = out.dtype.qmin, out.dtype.qmax
    bits = max(INDEX_BITS, out.qbits)
    adaptive = p.sample[0] <= 0 or p.sample[1] <= 0
    spatial = [round(s * (1 << SPATIAL_SHIFT)) for s in p.spatial]
    if not all(0 < s <= 65535 for s in spatial):
        raise QT.Unsupported(f"layer '{node.name}' (RoiAlign): spatial scales {list(p.spatial)} do not fit "
                             f"uint16 in Q{SPATIAL_SHIFT}")
    averaged = 1.0 if adaptive or p.method == "MAX" else 1.0 / (p.sample[0] * p.sample[1])
    rescales = [qmath.scale_approximation(averaged, min(out.qbits, settings_of(node).multiplier_bits or 15)),
                qmath.scale_approximation(1.0 / float(rois.scale), rois.qbits)]
    bins = [qmath.scale_approximation(1.0 / b, bits) for b in p.pooled]
    grids = [qmath.scale_approximation(1.0 / (2 * s), bits) if s > 0 else (1, 0) for s in p.sample]
    params = node.params
    for key, pairs_, types in (("", rescales, [multiplier_dtype(out.qbits), multiplier_dtype(rois.qbits)]),
                               ("bin_", bins, [Dtype.UINT16] * 2), ("grid_", grids, [Dtype.UINT16] * 2)):
        params[f"{key}scale_value"] = [int(m) for m, _ in pairs_]
        params[f"{key}scale_type"] = [t.value for t in types]
        params[f"{key}shift_value"] = [int(s) for _, s in pairs_]
        params[f"{key}shift_type"] = [shift_dtype(s).value for _, s in pairs_]
    params["spatial_scale_value"] = spatial
    params["spatial_scale_type"] = [Dtype.UINT16.value] * 2
    params["spatial_shift_value"] = SPATIAL_SHIFT
    params["spatial_shift_type"] = Dtype.INT8.value
