"""DetectionOutput: a two-stage detector's box regression (Faster R-CNN's second stage, or
its RPN), boxes decoded against the proposals, and the (box, class) pairs whose score
passes `score_threshold`, class by class; the parser writes it for Caffe and torchvision
Faster R-CNN heads, before FilterBoxes/NMS.

Inputs: scores [B, R, C0] (column 0, a background, left out when C0 > 1), box encodings
[B, R, C1, 4] (C1 = C0 - 1 or C0: a background's encodings left out too), proposals
[B, R, 4]. Params `image_height`, `image_width`, `score_threshold`, `variance` (4
divisors), `anchor_mode` (`caffe_detection`: encodings (tx, ty, tw, th) and proposals
(xmin, ymin, xmax, ymax); otherwise (ty, tx, th, tw) and (ymin, xmin, ymax, xmax)),
`bbox_xform_clip` (th, tw clamped to at most it; default none). Float (the tool chain's):
h = exp(th / v) * ha, cy = ty / v * ha + cya (x, w alike), box [cy - h/2, cx - w/2, cy +
h/2, cx + w/2] clamped to the image. Tops: scores [B, M], boxes [B, M, 4] (the first M
pairs above the threshold, class by class, each class's boxes in proposal order), boxes
per class [B, K], the classes present [B, K] (column index past the background), their
count [B, 1]; unused entries 0.

Quantized (the tool chain's integer form): `ty_lut`, `tx_lut`, `th_lut`, `tw_lut` (int16
tables indexed by the encodings' codes: ty / v at one grid, exp(th / v) at another),
proposal centers (p0 + p2) >> 1 and sizes p2 - p0 of the proposals' codes; h =
((clamp(lut_h * M1 >> d1) * ha) + 2^(s1 - d1 - 1)) >> (s1 - d1), cy likewise with M2, s2, d2
plus the center rescaled by M3, s3 (`box_scale_value` [M1, M2, M3], `box_shift_value`
[s1, s2, s3], `delta_shift` [d1, d2]); boxes clamped to [0, `height`], [0, `width`] (the
image on the boxes' int16 grid); scores compared as codes with `score_threshold_value`;
`variance` [1, 1, 1, 1]. Counts and classes uint16."""
import math

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._layout import param_choice
from ._movement import index_output_quantization, int_param

LUTS = ("ty_lut", "tx_lut", "th_lut", "tw_lut")
MODES = ["caffe_detection", "default_detect"]


def checked_inputs(node):
    """(scores [B, R, C], encodings [B, R, C, 4], proposals [B, R, 4]), the backgrounds left out."""
    B.count_io(node, 3, 5)
    scores, codes, proposals = (t.betensor for t in node.inputs)
    B.shape_is(node, scores, "input 0 (scores)", 3)
    B.shape_is(node, codes, "input 1 (box encodings)", 4, 4)
    B.shape_is(node, proposals, "input 2 (proposals)", 3, 4)
    if scores.shape[2] > 1:
        scores = scores[:, :, 1:]
    if codes.shape[2] != scores.shape[2]:
        codes = codes[:, :, 1:, :]
    if codes.shape[:3] != scores.shape or proposals.shape[:2] != scores.shape[:2]:
        raise B.fail(node, f"scores {list(node.inputs[0].betensor.shape)}, box encodings "
                           f"{list(node.inputs[1].betensor.shape)} and proposals {list(proposals.shape)} do not fit "
                           f"[B, R, C], [B, R, C or C - 1, 4], [B, R, 4]")
    for top in (0, 1, 2, 3):
        B.top_size(node, top, 1)
    return scores, codes, proposals


def caffe(node) -> bool:
    return param_choice(node, "anchor_mode", MODES, "default_detect") == "caffe_detection"


def encodings(node, codes: torch.Tensor, variance):
    """(ty, tx, th, tw) [B, C, R] of encodings [B, R, C, 4] divided by the variance."""
    parts = [codes[..., i] / variance[i] for i in range(4)]
    ty, tx, th, tw = (parts[1], parts[0], parts[3], parts[2]) if caffe(node) else parts
    return [t.permute(0, 2, 1) for t in (ty, tx, th, tw)]


def anchors(node, proposals: torch.Tensor, quantized: bool):
    """(center y, center x, height, width) [B, 1, R] of the proposals."""
    p = [proposals[..., i] for i in range(4)]
    halve = (lambda v: v >> 1) if quantized else (lambda v: v / 2.)
    c1, c2, l1, l2 = halve(p[0] + p[2]), halve(p[1] + p[3]), p[2] - p[0], p[3] - p[1]
    parts = (c2, c1, l2, l1) if caffe(node) else (c1, c2, l1, l2)
    return [t.unsqueeze(1) for t in parts]


def corners(cy, cx, h, w, height, width, half) -> torch.Tensor:
    """[B, R * C, 4] boxes (ymin, xmin, ymax, xmax) clamped to the image, box r * C + c."""
    ymin, xmin, ymax, xmax = cy - half(h), cx - half(w), cy + half(h), cx + half(w)
    parts = [ymin.clamp(0, height), xmin.clamp(0, width), ymax.clamp(0, height), xmax.clamp(0, width)]
    stacked = torch.stack(parts).permute(1, 3, 2, 0)
    return stacked.reshape(stacked.shape[0], -1, 4)


def decoded_float(node, codes, proposals) -> torch.Tensor:
    clip = B.number(node, "bbox_xform_clip", math.inf)
    ty, tx, th, tw = encodings(node, codes, B.numbers(node, "variance", 4))
    cya, cxa, ha, wa = anchors(node, proposals, False)
    th, tw = torch.clamp(th, max=clip), torch.clamp(tw, max=clip)
    h, w = torch.exp(th) * ha, torch.exp(tw) * wa
    cy, cx = ty * ha + cya, tx * wa + cxa
    height, width = (int_param(node, key) for key in ("image_height", "image_width"))
    return corners(cy, cx, h, w, height, width, lambda v: v / 2.0)


def decoded_int(node, codes, proposals) -> torch.Tensor:
    t = node.inputs[1]
    ty, tx, th, tw = encodings(node, codes.to(torch.int64), [1, 1, 1, 1])
    looked = [B.lookup(v, node.get_constant(name).betensor, t.dtype.bits, t.dtype.is_signed,
                       node.get_constant(name).dtype.bits, node.get_constant(name).dtype.is_signed)
              for v, name in zip((ty, tx, th, tw), LUTS)]
    cya, cxa, ha, wa = anchors(node, proposals.to(torch.int64), True)
    (m1, m2, m3), (s1, s2, s3) = (int_list3(node, key) for key in ("box_scale_value", "box_shift_value"))
    d1, d2 = int_list3(node, "delta_shift", 2)
    if s1 - d1 < 1 or s2 - d2 < 1:
        raise B.fail(node, f"box_shift_value {[s1, s2, s3]} must exceed delta_shift {[d1, d2]}")

    def scaled(lut, m, d, size, s):   # ((clamp(lut * m >> d) * size) + rounding) >> (s - d), in int32
        v = (B.wrap_int32(lut * m) >> d).clamp(-B.INT16_MAX - 1, B.INT16_MAX)
        return B.wrap_int32(B.wrap_int32(v * size) + (1 << (s - d - 1))) >> (s - d)

    def center(c):
        return qmath.requantize(c, m3, s3, 0, -B.INT16_MAX - 1, B.INT16_MAX).to(torch.int64)
    ly, lx, lh, lw = looked
    h, w = scaled(lh, m1, d1, ha, s1), scaled(lw, m1, d1, wa, s1)
    cy, cx = scaled(ly, m2, d2, ha, s2) + center(cya), scaled(lx, m2, d2, wa, s2) + center(cxa)
    return corners(cy, cx, h, w, int_param(node, "height"), int_param(node, "width"), lambda v: v >> 1)


def int_list3(node, key: str, count: int = 3):
    value = node.get_param(key)
    if not isinstance(value, list) or len(value) != count or any(isinstance(v, bool) or not isinstance(v, int)
                                                                 for v in value):
        raise B.fail(node, f"{key} must be a list of {count} integers, got {value!r}")
    return value


def select(node, scores: torch.Tensor, boxes: torch.Tensor, threshold):
    """One sample's tops from its scores [R, C] and boxes [R * C, 4]: the first M pairs
    above the threshold, class by class."""
    room_boxes, room_classes = B.top_size(node, 0, 1), B.top_size(node, 2, 1)
    class_ids, box_ids = (scores.t() > threshold).nonzero(as_tuple=True)
    class_ids, box_ids = class_ids[:room_boxes], box_ids[:room_boxes]
    labels, counts = torch.unique_consecutive(class_ids, return_counts=True)
    k = box_ids.numel()
    out_boxes = torch.zeros((room_boxes, 4), dtype=boxes.dtype, device=boxes.device)
    out_boxes[:k] = boxes[box_ids * scores.shape[1] + class_ids]
    index = torch.zeros(0, dtype=torch.int64, device=scores.device)
    return [B.fill(room_boxes, scores[box_ids, class_ids], scores, "boxes", node), out_boxes,
            B.fill(room_classes, counts, index, "classes", node), B.fill(room_classes, labels, index, "classes", node),
            torch.tensor([labels.numel()], device=scores.device)]


@op_register(OpType.DetectionOutput, "1.0")
def detectionoutput_forward(self, *args):
    scores, codes, proposals = checked_inputs(self)
    if self.quantized:
        boxes = decoded_int(self, codes, proposals)
        scores, threshold = scores.to(torch.int64), int_param(self, "score_threshold_value")
    else:
        boxes, threshold = decoded_float(self, codes, proposals), B.number(self, "score_threshold")
    return B.set_tops(self, [select(self, scores[b], boxes[b], threshold) for b in range(scores.shape[0])], (2, 3, 4))


# ---- quantization -------------------------------------------------------------------------
@quant_register(OpType.DetectionOutput, "1.0")
def detectionoutput_quantize(self, *args):
    B.per_tensor_activations(self)
    st = settings_of(self)
    scores, codes, proposals = self.inputs
    variance = B.numbers(self, "variance", 4)
    height, width = (int_param(self, key, minimum=1) for key in ("image_height", "image_width"))
    clip = B.number(self, "bbox_xform_clip", math.inf)
    v = B.code_values(codes, B.lut_codes(codes.dtype.bits, codes.dtype.is_signed, st.lut_items_in_bits))
    moves = [v / variance[0], v / variance[1]]
    sizes = [torch.exp(torch.clamp(v / variance[i], max=clip)) for i in (2, 3)]
    if caffe(self):
        moves, sizes = moves[::-1], sizes[::-1]   # the tables follow (ty, tx, th, tw)
    move_scale = B.INT16_MAX / max(float(m.abs().max()) for m in moves)
    size_scale = B.INT16_MAX / min(max(float(s.max()) for s in sizes), 1e30)
    p_scale = float(proposals.scale)
    p_reach = max(abs(proposals.qmin), abs(proposals.qmax)) / p_scale
    grid = min(B.INT16_MAX / max(height, width, p_reach), 0.5 * size_scale * p_scale, 0.5 * move_scale * p_scale)
    rescales = [qmath.scale_approximation(grid / r, 16, force_shift_positive=self.force_shift_positive)
                for r in (size_scale * p_scale, move_scale * p_scale, p_scale)]
    pre = [math.ceil(math.log2(m)) for m, _ in rescales[:2]]
    if any(s - d < 1 for (_, s), d in zip(rescales, pre)):
        raise QT.Unsupported(f"layer '{self.name}' (DetectionOutput): its box rescales {rescales} leave no "
                             f"rounding bit for the tool chain's integer forward")
    for name, table, scale in zip(LUTS, moves + sizes, (move_scale, move_scale, size_scale, size_scale)):
        fields.set_constant(self, name, torch.round(table * scale).clamp(-B.INT16_MAX - 1, B.INT16_MAX), Dtype.INT16)
    threshold = B.quantize_number(B.number(self, "score_threshold"), scores)
    for key in ("image_height", "image_width", "score_threshold", "bbox_xform_clip"):
        self.params.pop(key, None)
    self.params.update(height=int(height * grid), width=int(width * grid),
                       box_scale_value=[int(m) for m, _ in rescales], box_shift_value=[int(s) for _, s in rescales],
                       box_scale_type=[fields.multiplier_dtype(16).value] * 3,
                       box_shift_type=[fields.shift_dtype(s).value for _, s in rescales],
                       delta_shift=pre, score_threshold_value=threshold, variance=[1, 1, 1, 1])
    out_scores, out_boxes, counts, labels, total = self.outputs
    QT.copy_quantization(scores, out_scores)
    QT.set_quantization(out_boxes, grid, 0, -B.INT16_MAX, B.INT16_MAX, 16, True)
    for t in (counts, labels, total):
        index_output_quantization(self, t, 16)
