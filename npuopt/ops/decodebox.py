"""DecodeBox: an SSD head's boxes decoded against its anchors, and the (box, class) pairs
whose score passes `score_threshold`, grouped by class; what the parser writes for
`detection_postprocess = ssd | ssd_resnet`, before an NMS layer.

Inputs: scores [B, N, C] (the last `class_num` columns are the classes; the first
C - class_num, a background, are left out), box encodings [B, N, 4] (ty, tx, th, tw).
Constants `ycenter`, `xcenter`, `ha`, `wa` [N]: the anchors. Params `class_num`,
`score_threshold`, `variance` (default [10, 10, 5, 5]), `proposal_normalized` (default
true: boxes in [0, 1], else in pixels of `image_height` x `image_width`), `clip`
(default true). Float (the tool chain's float forward): h = exp(th / v2) * ha clamped to
[0, H], cy = ty / v0 * ha + ycenter (x and w alike), box [cy - h/2, cx - w/2, cy + h/2,
cx + w/2] clamped to the image when clip. Pairs with score > threshold, row by row;
more than top 0 holds: the lowest-scored ones that fit (the tool chain's ascending sort);
then class by class (ascending class, the pairs' order kept).
Tops: boxes [B, M, 4], boxes per class [B, K], classes present [B, 1], scores [B, M],
the classes (column index past the background) [B, K]; unused entries 0.

Quantized (the tool chain's integer form): anchors int16 on a grid of 2^n steps per unit,
`ty_lut`, `tx_lut` (ty / v0 * 2^box_shift), `th_lut`, `tw_lut` (exp(th / v2) *
2^box_shift), int16 tables indexed by the encodings' codes; h = lut_h * ha >> box_shift,
cy = (lut_y * ha >> box_shift) + ycenter, h clamped to [0, image_height], box =
[cy - (h >> 1), ...] clamped to [0, image_height/width] (the image at the anchors' grid);
scores q + zp compared with `score_threshold_uint8` (the threshold on the same grid).
Boxes top on the anchors' grid (int16), counts and classes 16-bit, scores q + zp at the
input's scale (zero point 0)."""
import math
from dataclasses import dataclass

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._movement import index_output_quantization, int_param

ANCHORS = ("ycenter", "xcenter", "ha", "wa")
LUTS = ("ty_lut", "tx_lut", "th_lut", "tw_lut")
VARIANCE = [10.0, 10.0, 5.0, 5.0]


@dataclass
class Params:
    class_num: int
    threshold: float
    variance: list
    normalized: bool
    clip: bool
    height: float   # the image's extent in the boxes' units (1 when normalized)
    width: float


def params(node, classes: int) -> Params:
    class_num = node.get_param("class_num")
    if isinstance(class_num, bool) or not isinstance(class_num, int) or not 1 <= class_num <= classes:
        raise B.fail(node, f"class_num must be an integer in [1, {classes}] (the scores' columns), got {class_num!r}")
    normalized = B.flag(node, "proposal_normalized", True)
    height = width = 1.0
    if not normalized or node.quantized:
        height, width = (float(int_param(node, key)) for key in ("image_height", "image_width"))
    return Params(class_num, B.number(node, "score_threshold"), B.numbers(node, "variance", 4, VARIANCE, True),
                  normalized, B.flag(node, "clip", True), height, width)


def checked_inputs(node):
    B.count_io(node, 2, 5)
    scores, deltas = (t.betensor for t in node.inputs)
    B.shape_is(node, scores, "input 0 (scores)", 3)
    B.shape_is(node, deltas, "input 1 (box encodings)", 3, 4)
    if scores.shape[:2] != deltas.shape[:2]:
        raise B.fail(node, f"scores {list(scores.shape)} and box encodings {list(deltas.shape)} differ in boxes")
    for key in ANCHORS:
        n = node.get_constant(key).betensor.numel()
        if n != scores.shape[1]:
            raise B.fail(node, f"constant '{key}' has {n} anchors for {scores.shape[1]} boxes")
    for top in (0, 3):
        B.top_size(node, top, 1)
    return scores, deltas


def anchors(node):
    return [node.get_constant(key).betensor.reshape(-1) for key in ANCHORS]


def decoded_float(node, deltas: torch.Tensor, p: Params) -> torch.Tensor:
    ya, xa, ha, wa = anchors(node)
    v = p.variance
    ty, tx, th, tw = (deltas[..., i] / v[i] for i in range(4))
    h = (torch.exp(th) * ha).clamp(0, p.height)
    w = (torch.exp(tw) * wa).clamp(0, p.width)
    cy, cx = ty * ha + ya, tx * wa + xa
    corners = [cy - h / 2., cx - w / 2., cy + h / 2., cx + w / 2.]
    if p.clip:
        corners = [c.clamp(0, limit) for c, limit in zip(corners, (p.height, p.width) * 2)]
    return torch.stack(corners, -1)


def decoded_int(node, deltas, p: Params) -> torch.Tensor:
    q = deltas.betensor.to(torch.int64)
    bits, signed = deltas.dtype.bits, deltas.dtype.is_signed
    out_bits = node.get_constant("ty_lut").dtype.bits
    ty, tx, th, tw = (B.lookup(q[..., i], node.get_constant(name).betensor, bits, signed, out_bits, signed)
                      for i, name in enumerate(LUTS))
    ya, xa, ha, wa = (a.to(torch.int64) for a in anchors(node))
    shift = int_param(node, "box_shift")
    h = (B.wrap_int32(th * ha) >> shift).clamp(0, int(p.height))
    w = (B.wrap_int32(tw * wa) >> shift).clamp(0, int(p.width))
    cy = (B.wrap_int32(ty * ha) >> shift) + ya
    cx = (B.wrap_int32(tx * wa) >> shift) + xa
    corners = [cy - (h >> 1), cx - (w >> 1), cy + (h >> 1), cx + (w >> 1)]
    if p.clip:
        corners = [c.clamp(0, int(limit)) for c, limit in zip(corners, (p.height, p.width) * 2)]
    return torch.stack(corners, -1)


def select(node, scores: torch.Tensor, boxes: torch.Tensor, threshold, class_num: int):
    """One sample's tops from its scores [N, C] and decoded boxes [N, 4]."""
    rooms = [B.top_size(node, i, 1) for i in (0, 1, 3, 4)]
    s = scores[:, scores.shape[1] - class_num:]
    box_ids, class_ids = (s > threshold).nonzero(as_tuple=True)
    if box_ids.numel() > rooms[0]:
        lowest = B.tool_chain_argsort(s[box_ids, class_ids], descending=False)[:rooms[0]]
        box_ids, class_ids = box_ids[lowest], class_ids[lowest]
    box_ids, class_ids, labels, counts = B.group_by_class(box_ids, class_ids)
    k = box_ids.numel()
    out_boxes = torch.zeros((rooms[0], 4), dtype=boxes.dtype, device=boxes.device)
    out_boxes[:k] = boxes[box_ids]
    out_scores = B.fill(rooms[2], s[box_ids, class_ids], scores, "boxes", node)
    index = torch.zeros(0, dtype=torch.int64, device=scores.device)
    return [out_boxes, B.fill(rooms[1], counts, index, "classes", node),
            torch.tensor([labels.numel()], device=scores.device), out_scores,
            B.fill(rooms[3], labels, index, "classes", node)]


@op_register(OpType.DecodeBox, "1.0")
def decodebox_forward(self, *args):
    scores, deltas = checked_inputs(self)
    p = params(self, scores.shape[2])
    if self.quantized:
        boxes = decoded_int(self, self.inputs[1], p)
        scores = scores.to(torch.int64) + int(self.inputs[0].zerop)
        threshold = int_param(self, "score_threshold_uint8")
    else:
        boxes, threshold = decoded_float(self, deltas, p), p.threshold
    return B.set_tops(self, [select(self, scores[b], boxes[b], threshold, p.class_num)
                             for b in range(scores.shape[0])], (1, 2, 4))


# ---- quantization -------------------------------------------------------------------------
def coordinate_bound(node, p: Params, moves: float, size_exp: float) -> float:
    """The largest magnitude an anchor or a decoded coordinate reaches, from the anchors and
    the encodings' representable range (moves: the largest |ty / v0|, |tx / v1|; size_exp:
    the largest exp(th / v2), exp(tw / v3))."""
    ya, xa, ha, wa = (a.to(torch.float64).abs() for a in anchors(node))
    reach = 0.0
    for c, a, limit in ((ya, ha, p.height), (xa, wa, p.width)):
        corner = (c + moves * a + torch.clamp(size_exp * a, max=limit) / 2).max().item() if c.numel() else 0.0
        reach = max(reach, min(corner, max(p.height, p.width)) if p.clip else corner)
    return max([reach, p.height if p.clip else 0.0] + [a.max().item() for a in (ya, xa, ha, wa) if a.numel()])


@quant_register(OpType.DecodeBox, "1.0")
def decodebox_quantize(self, *args):
    B.per_tensor_activations(self)
    st = settings_of(self)
    scores, deltas = self.inputs
    p = params(self, int(scores.ir_shape[2]) if scores.ir_shape else scores.betensor.shape[2])
    threshold = B.quantize_number(p.threshold, scores) + int(scores.zerop)
    if threshold == 0:
        raise QT.Unsupported(f"layer '{self.name}' (DecodeBox): score_threshold {p.threshold} is 0 on the scores' "
                             f"grid, which the tool chain's integer forward refuses")
    v = B.code_values(deltas, B.lut_codes(deltas.dtype.bits, deltas.dtype.is_signed, st.lut_items_in_bits))
    moves = [v / p.variance[0], v / p.variance[1]]
    sizes = [torch.exp(v / p.variance[2]), torch.exp(v / p.variance[3])]
    largest = min(max(float(t.abs().max()) for t in moves + sizes), B.INT16_MAX)
    shift = max(0, math.floor(math.log2(B.INT16_MAX / largest)))
    for name, table, low in zip(LUTS, moves + sizes, (-B.INT16_MAX - 1, -B.INT16_MAX - 1, 0, 0)):
        fields.set_constant(self, name, torch.round(table * (1 << shift)).clamp(low, B.INT16_MAX), Dtype.INT16)
    grid = B.power_of_two_scale(coordinate_bound(self, p, max(float(m.abs().max()) for m in moves),
                                                 min(max(float(s.max()) for s in sizes), 1e30)))
    for key, a in zip(ANCHORS, anchors(self)):
        q = torch.round(a.to(torch.float64) * grid).clamp(-B.INT16_MAX, B.INT16_MAX)
        fields.set_constant(self, key, q, Dtype.INT16)
    self.params.update(score_threshold_uint8=threshold, box_shift=shift, image_height=int(grid * p.height),
                       image_width=int(grid * p.width))
    wide = max(16, st.activation_bits)
    boxes, counts, total, out_scores, labels = self.outputs
    QT.set_quantization(boxes, float(grid), 0, *qmath.integer_range(wide, True), wide, True)
    for t, signed in ((counts, bool(self.force_dtype_int)), (total, bool(self.force_dtype_int)), (labels, True)):
        index_output_quantization(self, t, wide, signed)
    QT.copy_quantization(scores, out_scores)
    out_scores.zerop = 0
