"""BoundingBox: box deltas applied to boxes (a Mask R-CNN's refinement, as the parser
writes it from TensorFlow).

Inputs: boxes [..., 4] (ymin, xmin, ymax, xmax, normalized) and deltas [..., 4] (dy, dx,
dh, dw); params `std_div` (default [10, 10, 5, 5]) and `coordinate_order` (YX or XY: the
tool chain's forward reads both as YX, and so does npuopt). Float (the tool chain's):
cy = dy / std0 * h + (ymin + ymax) / 2, h' = exp(dh / std2) * h (x, w alike), the box
[cy - h'/2, cx - w'/2, cy + h'/2, cx + w'/2] clamped to [0, 1].

Quantized (the tool chain's integer form): boxes B = q + zp, deltas dy, dx with their zero
point added, dh, dw as codes into `th_lut`, `tw_lut` (int16 tables of exp(d / std) at one
grid, up to exp = 3276); `box_scale_value`/`box_shift_value` [y, x, h, w, anchor] and
`delta_shift` d: cy = clamp((dy * ((h * My) >> d) + 2^(sy-d-1)) >> (sy - d) + (B0 + B2) // 2),
h/2 = clamp((h * ((lut[dh] * Mh) >> 16)) >> (sh - 16)), corners (c -+ h/2) * Ma >> sa
(rounded) clamped to [0, 32767]: the top at 32767 steps per unit (int16)."""
import math

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._layout import param_choice
from ._movement import int_param

STD_DIV = [10.0, 10.0, 5.0, 5.0]
LARGEST_EXP = 3276.0     # exp(dh / std) beyond it is held at it (the tool chain's limit)
TOP_STEPS = 32767


def checked_inputs(node):
    B.count_io(node, 2, 1)
    boxes, deltas = (t.betensor for t in node.inputs)
    B.shape_is(node, boxes, "input 0 (boxes)", boxes.dim(), 4)
    if boxes.shape != deltas.shape:
        raise B.fail(node, f"boxes {list(boxes.shape)} and deltas {list(deltas.shape)} differ")
    param_choice(node, "coordinate_order", ["YX", "XY"], "YX")
    return boxes, deltas, B.numbers(node, "std_div", 4, STD_DIV, True)


def refined_float(boxes, deltas, std) -> torch.Tensor:
    cya, cxa = (boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2
    ha, wa = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    dy, dx, dh, dw = (deltas[..., i] / std[i] for i in range(4))
    cy, cx = dy * ha + cya, dx * wa + cxa
    h, w = torch.exp(dh) * ha, torch.exp(dw) * wa
    return torch.clip(torch.stack([cy - h / 2., cx - w / 2., cy + h / 2., cx + w / 2.], dim=-1), 0, 1.0)


def refined_int(node, boxes, deltas) -> torch.Tensor:
    bt, dt = node.inputs
    b = boxes.to(torch.int64) + int(bt.zerop)
    d = deltas.to(torch.int64)
    dy, dx = d[..., 0] + int(dt.zerop), d[..., 1] + int(dt.zerop)
    scales, shifts = (B.numbers(node, key, 5) for key in ("box_scale_value", "box_shift_value"))
    (my, mx, mh, mw, ma), (sy, sx, sh, sw, sa) = ([int(v) for v in scales], [int(v) for v in shifts])
    sat = int_param(node, "delta_shift")
    if min(sy, sx) - sat < 1 or min(sh, sw) < 16:
        raise B.fail(node, f"box_shift_value {[sy, sx, sh, sw, sa]} leaves no room for delta_shift {sat} (y, x) "
                           f"or the tables' 16 bits (h, w)")
    lo, hi = qmath.integer_range(bt.dtype.bits + dt.dtype.bits, True)
    h, w = B.wrap_int32(b[..., 2] - b[..., 0]), B.wrap_int32(b[..., 3] - b[..., 1])

    def center(delta, size, m, s, begin, end):
        scaled = B.wrap_int32(size * m) >> sat
        moved = B.wrap_int32(B.wrap_int32(delta * scaled) + (1 << (s - sat - 1))) >> (s - sat)
        return (moved + torch.div(begin + end, 2, rounding_mode="floor")).clamp(lo, hi)

    def half(code, size, name, m, s):
        looked = B.lookup(code, node.get_constant(name).betensor, dt.dtype.bits, dt.dtype.is_signed, 16, True)
        factor = B.wrap_int32(looked * m) >> 16
        return (B.wrap_int32(size * factor) >> (s - 16)).clamp(0, (1 << bt.dtype.bits) - 1)
    cy, cx = center(dy, h, my, sy, b[..., 0], b[..., 2]), center(dx, w, mx, sx, b[..., 1], b[..., 3])
    hh, hw = half(d[..., 2], h, "th_lut", mh, sh), half(d[..., 3], w, "tw_lut", mw, sw)
    rounding = 1 << (sa - 1) if sa > 1 else 0
    corners = [B.wrap_int32(B.wrap_int32(B.wrap_int32(v) * ma) + rounding) >> sa
               for v in (cy - hh, cx - hw, cy + hh, cx + hw)]
    return torch.stack(corners, dim=-1).clamp(0, TOP_STEPS)


@op_register(OpType.BoundingBox, "1.0")
def boundingbox_forward(self, *args):
    boxes, deltas, std = checked_inputs(self)
    out = self.outputs[0]
    if self.quantized:
        return B.store_ints(refined_int(self, boxes, deltas), out)
    out.betensor = refined_float(boxes, deltas, std)
    return out.betensor


@quant_register(OpType.BoundingBox, "1.0")
def boundingbox_quantize(self, *args):
    QT.check_quantized_inputs(self)
    std = B.numbers(self, "std_div", 4, STD_DIV, True)
    boxes, deltas = self.inputs
    codes = B.lut_codes(deltas.dtype.bits, deltas.dtype.is_signed, settings_of(self).lut_items_in_bits)
    v = B.code_values(deltas, codes)
    rescales, tables = [], []
    for i in (0, 1):   # y, x: the deltas' codes to units of the box size
        rescales.append(qmath.scale_approximation(1.0 / (float(deltas.scale) * std[i]), 16,
                                                  force_shift_positive=self.force_shift_positive))
    for i in (2, 3):   # h, w: exp(d / std) at 32767 / its largest value, then back, halved
        grow = torch.exp(torch.clamp(v / std[i], max=math.log(LARGEST_EXP)))
        scale = B.INT16_MAX / float(grow.max())
        tables.append(torch.round(grow * scale).clamp(0, B.INT16_MAX))
        m, s = qmath.scale_approximation(1.0 / scale, 16, force_shift_positive=self.force_shift_positive)
        rescales.append((m, s + 1))
    rescales.append(qmath.scale_approximation(TOP_STEPS / float(boxes.scale), 14,
                                              force_shift_positive=self.force_shift_positive))
    sat = boxes.dtype.bits + deltas.dtype.bits + 17 - 32 + (1 if int(deltas.zerop) else 0)
    if min(s for _, s in rescales[:2]) - sat < 1 or min(s for _, s in rescales[2:4]) < 16:
        raise QT.Unsupported(f"layer '{self.name}' (BoundingBox): its rescales {rescales} leave no rounding bit "
                             f"for the tool chain's integer forward")
    fields.set_constant(self, "th_lut", tables[0], Dtype.INT16)
    fields.set_constant(self, "tw_lut", tables[1], Dtype.INT16)
    self.params.update(box_scale_value=[int(m) for m, _ in rescales], box_shift_value=[int(s) for _, s in rescales],
                       box_scale_type=[fields.multiplier_dtype(16).value] * 5,
                       box_shift_type=[fields.shift_dtype(s).value for _, s in rescales], delta_shift=sat)
    QT.set_quantization(self.outputs[0], float(TOP_STEPS), 0, -B.INT16_MAX - 1, B.INT16_MAX, 16, True)
    self.outputs[0].qinvariant = boxes.qinvariant
