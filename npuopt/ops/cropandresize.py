"""CropAndResize: TensorFlow's crop_and_resize. For box r (input 1 [R, 4]: y1, x1, y2, x2
in [0, 1] of the map) of the map entry box_indices[r] (input 2 [R], int32), the crop_size
[ch, cw] grid of points y = y1 (H - 1) + i (y2 - y1)(H - 1) / (ch - 1) (ch = 1: the
centre (y1 + y2) / 2 (H - 1)), x likewise, read BILINEAR (floor and ceil) or NEAREST
(floor(v + 1/2)); a point outside [0, H - 1] x [0, W - 1] gives extrapolation_value.
Float32 as the tool chain computes it. Top [R, ch, cw, C].

Quantized, as the tool chain's forward (on the stored integers q of the map and of the
boxes, whose zero point must be 0; (S, s) = scale_value/shift_value ~ 1 / box scale):
hs = ((q_y2 - q_y1)(H - 1) 256 // (ch - 1)) >> 8 (0 when ch = 1: the box's start, not
its centre), y = q_y1 (H - 1) + i hs; outside when y < 0 or (y S) >> s > H - 1 (the
integer `extrapolation_value` then); BILINEAR: top = (y S) >> s, next = top + 1 (both
clamped into the map), f = y - trunc(top 2^s / S); t = tl + ((tr - tl) f S >> s), b =
bl + ((br - bl) f S >> s), out = t + ((b - t) f_y S >> s), where the tool chain takes the
x blend's products (tr - tl) f and then S in int32 (wrapping around); NEAREST: (y S +
2^(s-1)) >> s. The top keeps the map's quantization."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..registry import OpType, op_register, quant_register
from . import _roi
from ._layout import param_choice

INDEX_BITS = 15     # multiplier of 1 / box scale (the tool chain takes the boxes' bits, or 2 above 8)


def _params(node):
    extrapolation = node.get_param("extrapolation_value", 0.0)
    if isinstance(extrapolation, bool) or not isinstance(extrapolation, (int, float)):
        raise IRError(f"layer '{node.name}' (CropAndResize): extrapolation_value {extrapolation!r} must be a number")
    return _roi.int_pair(node, "crop_size"), param_choice(node, "method", ["BILINEAR", "NEAREST"], "BILINEAR"), \
        extrapolation


def _check(node):
    _roi.check_inputs(node, 3)
    fm, boxes, index = (t.betensor for t in node.inputs)
    _roi.check_map(node, fm)
    if boxes.dim() != 2 or boxes.shape[1] != 4 or index.dim() != 1 or len(index) != len(boxes):
        raise IRError(f"layer '{node.name}' (CropAndResize): boxes {list(boxes.shape)} and box_indices "
                      f"{list(index.shape)} must be [R, 4] and [R]")
    index = index.to(torch.int64)
    if bool(((index < 0) | (index >= fm.shape[0])).any()):
        raise IRError(f"layer '{node.name}' (CropAndResize): box_indices {index.tolist()} fall outside the map's "
                      f"batch of {fm.shape[0]}")
    return fm, boxes, index


def _float_axis(lo, hi, size: int, count: int):
    """Points [R, count] (float32) and whether each lies in [0, size - 1]."""
    if count > 1:
        scale = (hi - lo) * (size - 1) / (count - 1)
        c = (lo * (size - 1))[:, None] + torch.arange(count, device=lo.device)[None, :] * scale[:, None]
    else:
        c = (0.5 * (lo + hi) * (size - 1))[:, None]
    return c, (c >= 0) & (c <= size - 1)


def float_crop(fm, boxes, index, crop, method: str, extrapolation: float) -> torch.Tensor:
    b = boxes.to(torch.float32)
    h, w = fm.shape[1], fm.shape[2]
    ys, y_in = _float_axis(b[:, 0], b[:, 2], h, crop[0])
    xs, x_in = _float_axis(b[:, 1], b[:, 3], w, crop[1])
    inside = (y_in[:, :, None] & x_in[:, None, :]).unsqueeze(-1)
    ys, xs = torch.where(y_in, ys, torch.zeros_like(ys)), torch.where(x_in, xs, torch.zeros_like(xs))
    m = fm[index]
    if method == "NEAREST":
        out = _pick(m, torch.floor(ys + 0.5).long(), torch.floor(xs + 0.5).long())
    else:
        top, left = torch.floor(ys), torch.floor(xs)
        ly, lx = (ys - top).to(fm.dtype)[:, :, None, None], (xs - left).to(fm.dtype)[:, None, :, None]
        top, bottom, left, right = top.long(), torch.ceil(ys).long(), left.long(), torch.ceil(xs).long()
        upper = _pick(m, top, left) + (_pick(m, top, right) - _pick(m, top, left)) * lx
        lower = _pick(m, bottom, left) + (_pick(m, bottom, right) - _pick(m, bottom, left)) * lx
        out = upper + (lower - upper) * ly
    return torch.where(inside, out, torch.full_like(out, float(extrapolation)))


def _pick(m: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """m[r, ys[r, i], xs[r, j]] -> [R, ch, cw, C]."""
    r = torch.arange(len(m), device=m.device)[:, None, None]
    return m[r, ys[:, :, None], xs[:, None, :]]


def _int_axis(lo, hi, size: int, count: int, s_mul: int, shift: int, nearest: bool):
    """(index, next index, fraction, inside) of the integer points of one axis."""
    if count > 1:
        step = torch.div((hi - lo) * (size - 1) * 256, count - 1, rounding_mode="trunc") >> 8
    else:
        step = torch.zeros_like(lo)
    c = (lo * (size - 1))[:, None] + torch.arange(count, device=lo.device)[None, :] * step[:, None]
    scaled = c * s_mul
    inside = (c >= 0) & ((scaled >> shift) <= size - 1)
    if nearest:
        low = (scaled + (1 << (shift - 1))) >> shift if shift > 0 else scaled
        return torch.clamp(low, 0, size - 1), None, None, inside
    low = scaled >> shift
    frac = c - torch.div(low * (1 << shift), s_mul, rounding_mode="trunc")
    return torch.clamp(low, 0, size - 1), torch.clamp(low + 1, 0, size - 1), frac, inside


def _wrap32(v: torch.Tensor) -> torch.Tensor:
    """v as the tool chain's int32 product holds it (two's complement wraparound)."""
    return torch.remainder(v + (1 << 31), 1 << 32) - (1 << 31)


def lerp_bound(fm_span: int, mult: int, shift: int) -> int:
    """The largest |(tr - tl) f S| of the x blend: f < 2^s / S + 1."""
    return fm_span * ((1 << shift) // mult + 2) * mult


def int_crop(node, fm, boxes, index, crop, method: str) -> torch.Tensor:
    rescale = Rescale.read(node)
    s_mul, shift = int(rescale.multiplier), int(rescale.shift)
    if s_mul <= 0 or not 0 <= shift <= 40:
        raise IRError(f"layer '{node.name}' (CropAndResize): scale_value {s_mul} / shift_value {shift} must be a "
                      f"positive multiplier and a shift in [0, 40]")
    fill = node.get_param("extrapolation_value", 0)
    if isinstance(fill, bool) or not isinstance(fill, int):
        raise IRError(f"layer '{node.name}' (CropAndResize): quantized, but extrapolation_value {fill!r} is not "
                      f"an integer")
    b = boxes.to(torch.int64)
    q = fm.to(torch.int64)[index]
    h, w = fm.shape[1], fm.shape[2]
    nearest = method == "NEAREST"
    y0, y1, fy, y_in = _int_axis(b[:, 0], b[:, 2], h, crop[0], s_mul, shift, nearest)
    x0, x1, fx, x_in = _int_axis(b[:, 1], b[:, 3], w, crop[1], s_mul, shift, nearest)
    if nearest:
        out = _pick(q, y0, x0)
    else:
        fx, fy = fx[:, None, :, None], fy[:, :, None, None] * s_mul
        tl, tr, bl, br = _pick(q, y0, x0), _pick(q, y0, x1), _pick(q, y1, x0), _pick(q, y1, x1)
        upper = tl + (_wrap32(_wrap32((tr - tl) * fx) * s_mul) >> shift)
        lower = bl + (_wrap32(_wrap32((br - bl) * fx) * s_mul) >> shift)
        out = upper + (((lower - upper) * fy) >> shift)
    inside = (y_in[:, :, None] & x_in[:, None, :]).unsqueeze(-1)
    return torch.where(inside, out, torch.full_like(out, fill))


@op_register(OpType.CropAndResize, "1.0")
def crop_and_resize_forward(self, *args):
    fm, boxes, index = _check(self)
    crop, method, extrapolation = _params(self)
    out_t = self.outputs[0]
    if not self.quantized:
        out_t.betensor = float_crop(fm, boxes, index, crop, method, extrapolation)
        return out_t.betensor
    y = int_crop(self, fm, boxes, index, crop, method)
    return QT.store_output(self, torch.clamp(y, out_t.qmin, out_t.qmax), out_t)


@quant_register(OpType.CropAndResize, "1.0")
def crop_and_resize_quantize(self, *args):
    """The top keeps the map's quantization (its dtype's range); (S, s) ~ 1 / box scale
    (the most bits up to 15 that keep the x blend's int32 products from wrapping; none do
    for a 16-bit map: such BILINEAR layers stay float); extrapolation_value becomes its
    integer on the map's grid. The tool chain's forward reads the boxes' integers without
    their zero point, and for a crop of one row or column their start instead of their
    centre: such layers stay in float."""
    _roi.quantized_inputs(self, 3, 1, "boxes")
    fm, boxes, _ = self.inputs
    crop, method, extrapolation = _params(self)
    if min(crop) == 1:
        raise QT.Unsupported(f"layer '{self.name}' (CropAndResize): the integer form of a crop of one row or "
                             f"column reads the box's start, not its centre")
    out = self.outputs[0]
    QT.copy_quantization(fm, out)
    out.qmin, out.qmax = out.dtype.qmin, out.dtype.qmax
    for bits in range(INDEX_BITS, 1, -1):  # the x blend's int32 products must not wrap
        m, s = qmath.scale_approximation(1.0 / float(boxes.scale), bits)
        if method == "NEAREST" or lerp_bound(fm.dtype.qmax - fm.dtype.qmin, m, s) < 1 << 31:
            break
    if s < 1 or (method == "BILINEAR" and lerp_bound(fm.dtype.qmax - fm.dtype.qmin, m, s) >= 1 << 31):
        raise QT.Unsupported(f"layer '{self.name}' (CropAndResize): a {fm.dtype.bits}-bit map with boxes of scale "
                             f"{float(boxes.scale):g} overflows the integer form's int32 blend; kept in float")
    Rescale(m, s, Dtype.UINT16).write(self)
    fill = qmath.quantize(torch.tensor([float(extrapolation)]), fm.scale, fm.zerop, out.qmin, out.qmax)
    self.params["extrapolation_value"] = int(fill.item())
