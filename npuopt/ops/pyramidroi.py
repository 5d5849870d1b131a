"""PyramidROIAlign: boxes [1, R, 4] (y1, x1, y2, x2; input 0) pooled from one of four
NHWC feature maps (inputs 1..4, batch entry 0) chosen per box by its area, as the tool
chain's float forward computes it. Top [R, resize_height, resize_width, C].

* proposal_normalized=true (the parser's default; boxes in [0, 1]): the level is 2..5 from
  the area a = (y2 - y1)(x2 - x1) against fixed bounds (5: a > 0.0957, 4: 0.0239 < a <
  0.0957, 3: 0.00598 < a < 0.0239, 2: a < 0.00598; a box exactly on a bound reads input
  4); level k reads input k - 1. The box is resized as TensorFlow's crop_and_resize,
  bilinear, with the map's H and W swapped in the scales (as the tool chain does; equal
  for square maps): y = (W - 1) y1 + i (y2 - y1)(W - 1) / (rh - 1), clamped to [0, H - 1],
  x likewise with H - 1, all in float32.
* proposal_normalized=false (boxes in image pixels): level = clamp(floor(4 + log2(sqrt(a) /
  224) + 1e-6), 2, 5) - 2 reads input level + 1 with spatial_scale_value[level]; RoiAlign
  of sample_h x sample_w samples per bin ([0, 0]: ceil(bin) per box), HALF_PIXEL or not;
  a sample outside [-1, H] x [-1, W] counts 0, others are clamped into the map; a box of
  zero width or height gives 0.

Quantized (proposal_normalized=false only; docs/integer-semantics.md): see
_pyramid_int.py. The normalized form's integer format assumes boxes in Q15, which a
quantized IR's box tensor rarely is: npuopt keeps it in float."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _pyramid_int as PI
from . import _roi

NORMALIZED_BOUNDS = (0.005978503007119795, 0.02391401202847918, 0.09565604811391672)


def pyramid_params(node) -> dict:
    get = node.get_param
    sizes = {}
    for key in ("resize_height", "resize_width", "image_height", "image_width"):
        value = get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise IRError(f"layer '{node.name}' (PyramidROIAlign): {key} {value!r} must be a positive integer")
        sizes[key] = value
    normalized = get("proposal_normalized", True)
    if normalized not in (True, False):
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): proposal_normalized {normalized!r} must be "
                      f"true or false")
    if normalized and (sizes["resize_height"] < 2 or sizes["resize_width"] < 2):
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): resize_height/resize_width must be at least 2 "
                      f"with proposal_normalized=true (the box is divided into size - 1 steps)")
    return dict(sizes, normalized=bool(normalized), half_pixel=_roi.half_pixel(node, "OUTPUT_HALF_PIXEL"),
                spatial=_roi.number_list(node, "spatial_scale_value", 4, [1.0, 1.0, 1.0, 1.0]),
                sample=_roi.int_pair(node, "sample", positive=False, default=[0, 0]))


def check_pyramid(node):
    _roi.check_inputs(node, 5)
    boxes = node.inputs[0].betensor
    if boxes.dim() != 3 or boxes.shape[0] != 1 or boxes.shape[2] != 4:
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): input 0 must hold boxes [1, R, 4], got shape "
                      f"{list(boxes.shape)}")
    maps = [t.betensor for t in node.inputs[1:]]
    for k, m in enumerate(maps):
        _roi.check_map(node, m, f"input {k + 1}")
    if len({int(m.shape[-1]) for m in maps}) != 1:
        raise IRError(f"layer '{node.name}' (PyramidROIAlign): the feature maps' channels differ: "
                      f"{[int(m.shape[-1]) for m in maps]}")
    return boxes[0], maps


# ---- float ----------------------------------------------------------------------------------
def _normalized_levels(boxes: torch.Tensor) -> torch.Tensor:
    """Index of the input each box reads (1..4; 4 also for a box exactly on a bound)."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    b3, b2, b1 = NORMALIZED_BOUNDS
    level = (area > b1) * 5 + ((area < b1) & (area > b2)) * 4 + ((area < b2) & (area > b3)) * 3 + (area < b3) * 2
    return torch.where(level == 0, torch.full_like(level, 5), level) - 1


def _crop_and_resize(fm: torch.Tensor, boxes: torch.Tensor, rh: int, rw: int) -> torch.Tensor:
    """TensorFlow-style bilinear crops of map fm [1, H, W, C] (the tool chain's form)."""
    h, w = fm.shape[1], fm.shape[2]
    hs = (boxes[:, 2] - boxes[:, 0]) * (w - 1) / (rh - 1)
    ws = (boxes[:, 3] - boxes[:, 1]) * (h - 1) / (rw - 1)
    y = ((w - 1) * boxes[:, 0])[:, None] + torch.arange(rh, device=fm.device)[None, :] * hs[:, None]
    x = ((h - 1) * boxes[:, 1])[:, None] + torch.arange(rw, device=fm.device)[None, :] * ws[:, None]
    y, x = torch.clamp(y, 0, h - 1), torch.clamp(x, 0, w - 1)
    top, left = torch.floor(y), torch.floor(x)
    ly, lx = (y - top).to(fm.dtype), (x - left).to(fm.dtype)
    top, bottom, left, right = top.long(), torch.ceil(y).long(), left.long(), torch.ceil(x).long()
    m = fm[0]
    tl = m[top[:, :, None], left[:, None, :]]
    tr = m[top[:, :, None], right[:, None, :]]
    bl = m[bottom[:, :, None], left[:, None, :]]
    br = m[bottom[:, :, None], right[:, None, :]]
    ly, lx = ly[:, :, None, None], lx[:, None, :, None]
    return (tl + br - tr - bl) * (ly * lx) + (tl + (tr - tl) * lx) + (bl - tl) * ly


def _pixel_levels(boxes: torch.Tensor) -> torch.Tensor:
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    level = torch.floor(4 + torch.log2(torch.sqrt(area) / 224) + torch.tensor(1e-6, dtype=torch.float32))
    return torch.clamp(level, min=2, max=5).to(torch.int64) - 2


def _float_axis(lo, hi, scale: float, bins: int, ratio: int, size: int, half_pixel: bool):
    """Per-axis taps of the pixel-box form (float32)."""
    start, end, grid, c, inside = _roi.loop_points(lo, hi, scale, bins, ratio, half_pixel)
    inside = inside & (c >= -1.0) & (c <= size)
    c = torch.clamp(torch.where(inside, c, torch.zeros_like(c)), 0, size - 1)
    low = torch.floor(c)
    frac = c - low
    low = low.to(torch.int64)
    zero = torch.zeros_like(frac)
    return low, torch.clamp(low + 1, max=size - 1), torch.where(inside, 1.0 - frac, zero), \
        torch.where(inside, frac, zero), grid, (end != start) | (not half_pixel)


def _float_pixel_boxes(fm: torch.Tensor, boxes: torch.Tensor, p: dict, level: int) -> torch.Tensor:
    (sh, sw), scale = p["sample"], p["spatial"][level]
    rh, rw = p["resize_height"], p["resize_width"]
    h, w, c = fm.shape[1:]
    ys = _float_axis(boxes[:, 0], boxes[:, 2], scale, rh, sh, h, p["half_pixel"])
    xs = _float_axis(boxes[:, 1], boxes[:, 3], scale, rw, sw, w, p["half_pixel"])
    index = _roi.flat_samples(_roi.corner_grid(ys[0], ys[1], xs[0], xs[1], w))
    weight = _roi.flat_samples(_roi.corner_weights(*(v.to(fm.dtype) for v in (ys[2], ys[3], xs[2], xs[3]))))
    batch = torch.zeros(len(boxes), dtype=torch.int64, device=fm.device)
    out = _roi.gather_sum(fm[:1], batch, index, weight)
    out = out / (ys[4] * xs[4]).to(out.dtype).reshape(-1, 1, 1)
    out = torch.where((ys[5] & xs[5]).reshape(-1, 1, 1), out, torch.zeros_like(out))
    return out.reshape(len(boxes), rh, rw, c)


def float_pyramid(boxes: torch.Tensor, maps, p: dict) -> torch.Tensor:
    rh, rw, c = p["resize_height"], p["resize_width"], maps[0].shape[-1]
    b32 = boxes.to(torch.float32)
    out = torch.zeros((len(boxes), rh, rw, c), dtype=maps[0].dtype, device=maps[0].device)
    levels = _normalized_levels(b32) if p["normalized"] else _pixel_levels(b32) + 1
    for k in range(4):
        chosen = levels == k + 1
        if bool(chosen.any()):
            out[chosen] = _crop_and_resize(maps[k], b32[chosen], rh, rw) if p["normalized"] else \
                _float_pixel_boxes(maps[k], b32[chosen], p, k)
    return out


@op_register(OpType.PyramidROIAlign, "1.0")
def pyramid_forward(self, *args):
    boxes, maps = check_pyramid(self)
    p = pyramid_params(self)
    out_t = self.outputs[0]
    if not self.quantized:
        out_t.betensor = float_pyramid(boxes, maps, p)
        return out_t.betensor
    if p["normalized"]:
        raise IRError(f"layer '{self.name}' (PyramidROIAlign): a quantized proposal_normalized=true layer is not "
                      f"supported yet (npuopt keeps it in float)")
    return QT.store_output(self, PI.int_pyramid(self, p), out_t)


@quant_register(OpType.PyramidROIAlign, "1.0")
def pyramid_quantize(self, *args):
    _roi.check_inputs(self, 5)
    p = pyramid_params(self)
    if p["normalized"]:
        raise QT.Unsupported(f"layer '{self.name}' (PyramidROIAlign): the integer form of proposal_normalized=true "
                             f"needs boxes in Q15; kept in float")
    PI.quantize_pyramid(self, p)
