"""PyramidROIAlign (proposal_normalized=false) in integers, as the tool chain's forward
computes a quantized layer, and its quantize function (docs/integer-semantics.md).

Level: a = (q_y2 - q_y1)(q_x2 - q_x1) on the stored box integers, wrapped to int32, against
`levels` [L0, L1, L2] (wrapped to int32 too; a < L0: 0, L0 <= a < L1: 1, L1 <= a < L2: 2,
a >= L2: 3, a later test overriding an earlier one). npuopt keeps a layer whose box
areas could pass 2^31 in float (16-bit boxes). With ss = `spatial_shift` and
(M_k, s_k) = input_scale[k]/input_shift[k], a box corner v (A = q + zp) becomes
clamp(round(v M_k 2^-s_k), 0, 65535) - half (half = 2^(ss-1) with HALF_PIXEL); extent
e = end - start (at least 2^ss without HALF_PIXEL), n samples (fixed, or trunc(e /
(bins 2^ss)) + 1 when not exact), step = trunc(e / bins), bin = trunc(step / 2n); sample
y = trunc(step i + start) + bin (2g + 1), taps y >> ss and the next, fraction y - (low <<
ss); a sample whose low tap is below -1 or past the map counts 0, others are clamped in;
weights (d * d') >> ss; each sample's weighted sum (exact) is added to a float32
accumulator; out = R(acc, M, s + ss) with scale_value/shift_value[k] (fixed samples), or
R(fl32(acc * M) // n_y n_x, 1, s + ss) (adaptive). A box of zero extent gives the
integer 0."""
import math

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import multiplier_dtype, shift_dtype
from . import _roi

BOX_BITS = 16            # the box corners' integer range, [0, 65535] in Q(spatial_shift)
LEVEL_SIDES = (112, 224, 448)


def _list(node, key: str, count: int) -> list:
    value = node.get_param(key)
    if not isinstance(value, (list, tuple)) or len(value) != count or \
            any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): quantized, but {key} {value!r} is not "
                      f"{count} integers")
    return list(value)


def _wrap32(v: torch.Tensor) -> torch.Tensor:
    return torch.remainder(v + (1 << 31), 1 << 32) - (1 << 31)


def _axis(start, extent, bins: int, ratio: int, size: int, ss: int):
    unit = bins << ss
    if ratio > 0:
        grid = torch.full_like(extent, ratio)
    else:
        whole = torch.div(extent, unit, rounding_mode="trunc")
        grid = whole + ((extent - whole * unit) > 0).to(torch.int64)
    step = torch.div(extent, bins, rounding_mode="trunc")
    width = torch.div(step, 2 * torch.clamp(grid, min=1), rounding_mode="trunc")
    largest = _roi.largest_grid(grid)
    i = torch.arange(bins, device=start.device).reshape(1, -1, 1)
    g = torch.arange(largest, device=start.device).reshape(1, 1, -1)
    c = (step.reshape(-1, 1, 1) * i + start.reshape(-1, 1, 1)) + width.reshape(-1, 1, 1) * (2 * g + 1)
    low = c >> ss
    frac = c - (low << ss)
    inside = (low >= -1) & (low <= size) & _roi.sample_mask(grid, largest)[:, None, :]
    high = torch.clamp(low + 1, 0, size - 1)
    low = torch.clamp(low, 0, size - 1)
    one = torch.full_like(frac, 1 << ss)
    zero = torch.zeros_like(frac)
    return low, high, torch.where(inside, one - frac, zero), torch.where(inside, frac, zero), grid, inside


def _level(node, p, fm: torch.Tensor, boxes: torch.Tensor, rescale, out_rescale, ss: int) -> torch.Tensor:
    """R (before the output's zero point and range) of the boxes A of one level."""
    m, s = rescale
    half = 1 << (ss - 1) if p["half_pixel"] else 0
    y1, x1, y2, x2 = (torch.clamp(torch.round(boxes[:, k].to(torch.float64) * m * 2.0 ** -s), 0,
                                  (1 << BOX_BITS) - 1).to(torch.int64) - half for k in range(4))
    ey, ex = y2 - y1, x2 - x1
    if not p["half_pixel"]:
        ey, ex = torch.clamp(ey, min=1 << ss), torch.clamp(ex, min=1 << ss)
    (sh, sw), rh, rw = p["sample"], p["resize_height"], p["resize_width"]
    h, w, c = fm.shape[1:]
    ys, xs = _axis(y1, ey, rh, sh, h, ss), _axis(x1, ex, rw, sw, w, ss)
    index = _roi.flat_samples(_roi.corner_grid(ys[0], ys[1], xs[0], xs[1], w))
    weight = _roi.flat_samples(_roi.corner_weights(ys[2], ys[3], xs[2], xs[3], lambda a, b: (a * b) >> ss))
    batch = torch.zeros(len(boxes), dtype=torch.int64, device=fm.device)
    acc = _roi.gather_reduce(fm[:1], batch, index, weight, _float32_sum)
    m_out, s_out = out_rescale
    if sh > 0 and sw > 0:
        y = torch.round(acc.to(torch.float64) * m_out * 2.0 ** -(s_out + ss))
    else:
        n = (ys[4] * xs[4]).to(torch.float32).reshape(-1, 1, 1)
        y = torch.round(torch.floor_divide(acc.to(torch.float32) * m_out, n).to(torch.float64) * 2.0 ** -(s_out + ss))
    y = torch.where(((ey != 0) & (ex != 0)).reshape(-1, 1, 1), y, torch.full_like(y, math.nan))
    return y.reshape(len(boxes), rh, rw, c)


def _float32_sum(v: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    """Each sample's exact weighted sum of its taps, added in sample order to a float32
    accumulator (as the tool chain's forward sums them)."""
    terms = (v * wt).sum(3)
    acc = torch.zeros((terms.shape[0], terms.shape[1], terms.shape[3]), dtype=torch.float32, device=v.device)
    for k in range(terms.shape[2]):
        acc = acc + terms[:, :, k].to(torch.float32)
    return acc


def _levels(area: torch.Tensor, bounds) -> torch.Tensor:
    """The tool chain's level masks (bounds wrapped to int32 as its comparison does), the
    later overriding the earlier; a box in none reads level 0."""
    level = torch.zeros_like(area)
    masks = [area < bounds[0], (area >= bounds[0]) & (area < bounds[1]), (area >= bounds[1]) & (area < bounds[2]),
             area >= bounds[2]]
    for k, mask in enumerate(masks):
        level = torch.where(mask, torch.full_like(level, k), level)
    return level


def int_pyramid(node, p) -> torch.Tensor:
    """The quantized layer's output integers."""
    boxes_t, maps_t = node.inputs[0], node.inputs[1:]
    ss = node.get_param("spatial_shift")
    if isinstance(ss, bool) or not isinstance(ss, int) or not 0 <= ss <= 30:
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): spatial_shift {ss!r} must be an integer in [0, 30]")
    scales, shifts = _list(node, "scale_value", 4), _list(node, "shift_value", 4)
    in_scales, in_shifts = _list(node, "input_scale", 4), _list(node, "input_shift", 4)
    bounds = _list(node, "levels", 3)
    q = boxes_t.betensor[0].to(torch.int64)
    area = _wrap32((q[:, 2] - q[:, 0]) * (q[:, 3] - q[:, 1]))
    level = _levels(area, [int(_wrap32(torch.tensor(b))) for b in bounds])
    boxes = _roi.shifted_int(boxes_t)[0]
    out_t = node.outputs[0]
    y = torch.zeros((len(q), p["resize_height"], p["resize_width"], maps_t[0].betensor.shape[-1]),
                    dtype=torch.float64, device=q.device)
    for k in range(4):
        chosen = level == k
        if bool(chosen.any()):
            y[chosen] = _level(node, p, _roi.shifted_int(maps_t[k]), boxes[chosen], (in_scales[k], in_shifts[k]),
                               (scales[k], shifts[k]), ss)
    zero = torch.isnan(y)
    y = torch.clamp(torch.nan_to_num(y, nan=0.0) - out_t.zerop, out_t.qmin, out_t.qmax)
    return torch.where(zero, torch.zeros_like(y), y)


def quantize_pyramid(node, p) -> None:
    """As the tool chain: the top from its calibrated range (signed when a map is); the box
    corners to Q(spatial_shift) pixels of each level (spatial_scale * 2^ss / s_box, 15-bit
    multipliers) with ss = floor(log2(65535 / (largest image side * largest spatial
    scale))); per level M/s ~ s_out / (s_k * samples) (fixed samples) or s_out / s_k; the
    area bounds (112, 224, 448)^2 * s_box^2."""
    QT.check_quantized_inputs(node)
    boxes, maps = node.inputs[0], node.inputs[1:]
    out = node.outputs[0]
    QT.quantize_activation(node, out, signed=any(m.dtype.is_signed for m in maps))
    ss = math.floor(math.log2(65535 / (max(p["image_height"], p["image_width"]) * max(p["spatial"]))))
    if ss < 1:
        raise QT.Unsupported(f"layer '{node.name}' (PyramidROIAlign): image size and spatial scales leave no "
                             f"fraction bits in 16 bits")
    samples = p["sample"][0] * p["sample"][1] if min(p["sample"]) > 0 else 1
    boxes_scale = float(boxes.scale)
    if (boxes.qmax - boxes.qmin) ** 2 >= 1 << 31 or LEVEL_SIDES[-1] ** 2 * boxes_scale ** 2 >= 1 << 31:
        raise QT.Unsupported(f"layer '{node.name}' (PyramidROIAlign): the box areas of {boxes.qbits}-bit boxes "
                             f"overflow the integer form's 32-bit level test; kept in float")
    ins = [qmath.scale_approximation(s * 2 ** ss / boxes_scale, 15) for s in p["spatial"]]
    outs = [qmath.scale_approximation(float(out.scale) / (float(m.scale) * samples), out.qbits) for m in maps]
    params = node.params
    for key, values, mult_type in (("scale_value", [m for m, _ in outs], multiplier_dtype(out.qbits)),
                                   ("input_scale", [m for m, _ in ins], Dtype.UINT16)):
        params[key], params[key.replace("_value", "") + "_type"] = [int(v) for v in values], [mult_type.value] * 4
    for key, values in (("shift_value", [s for _, s in outs]), ("input_shift", [s for _, s in ins])):
        params[key], params[key.replace("_value", "") + "_type"] = [int(v) for v in values], \
            [shift_dtype(v).value for v in values]
    params["spatial_shift"] = ss
    params["levels"] = [int(side ** 2 * boxes_scale ** 2 + 0.5) for side in LEVEL_SIDES]
