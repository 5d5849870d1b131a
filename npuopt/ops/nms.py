"""NMS: non-maximum suppression class by class, as the parser writes it after DecodeBox,
DetectionOutput/FilterBoxes or RegionFuse.

Inputs: boxes [B, P, 4] (ymin, xmin, ymax, xmax; a corner pair in either order), boxes
per class [B, K], classes present [B, 1], scores [B, P]: the boxes of class slot c follow
those of slot c - 1. Params: `method` HARD (default; LINEAR runs as HARD, as the tool
chain does) or GAUSSIAN (soft NMS, `soft_nms_sigma` > 0), `iou_threshold`,
`score_threshold` (default -inf), `max_output_size` (the most boxes kept per class;
default: all top 0 holds). Per class, HARD (the tool chain's order): the boxes sorted by
score (torch's sort, not stable), the best kept and every later box whose intersection
exceeds iou_threshold * union dropped, until the best left is at most score_threshold;
GAUSSIAN: the best candidate's score decays by exp(-iou^2 / (2 sigma)) against each
box kept since it was last looked at; kept when it does not decay, dropped when it falls
to score_threshold. Tops: the kept boxes [B, M, 4], boxes kept per class slot [B, K],
their scores [B, M], their indices within their class [B, M]; the classes' kept boxes one
after the other, cut at M; unused entries 0.

Quantized (the tool chain's integer form): boxes q + zp; areas |dy * dx| (int32) >>
`areas_shift` (13 for 16-bit boxes, as the tool chain; 2 * bits - 19 for narrower ones),
intersections likewise, a box dropped when inter > (union * `iou_threshold`) >>
`iou_thresh_shift` (iou_threshold an integer: 256 * the float one, shift 8); scores
compared as codes with `score_threshold` (on the scores' grid; -inf: the dtype's minimum
- 1); GAUSSIAN: iou = inter * 255 // union indexes `gaussian_scale_lut`
(uint16) and `gaussian_shift_lut` (uint8), score = score * scale >> shift. Kept boxes
(q + zp) * `scale_value` >> `shift_value` (the boxes' grid, or whole units); scores keep
the input's grid; counts and indices uint16."""
import math

import numpy
import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._layout import param_choice
from ._movement import index_output_quantization, int_param

METHODS = ["HARD", "GAUSSIAN", "LINEAR"]
AREAS_SHIFT = 13   # the tool chain's, for 16-bit boxes; narrower boxes take less (areas_shift)
IOU_SHIFT = 8
SIGMA_SHIFT = 8
NMS_BLOCK = 256   # candidates whose overlaps are computed at once


def checked_inputs(node):
    B.count_io(node, 4, 4)
    boxes, counts, total, scores = (t.betensor for t in node.inputs)
    B.shape_is(node, boxes, "input 0 (boxes)", 3, 4)
    scores = scores.reshape(boxes.shape[0], -1)
    if scores.shape[1] != boxes.shape[1] or counts.dim() != 2 or counts.shape[0] != boxes.shape[0] \
            or total.reshape(boxes.shape[0], -1).shape[1] != 1:
        raise B.fail(node, f"inputs of shapes {[list(t.betensor.shape) for t in node.inputs]} do not fit boxes "
                           f"[B, P, 4], boxes per class [B, K], classes [B, 1], scores [B, P]")
    return boxes, counts.to(torch.int64), total.reshape(-1).to(torch.int64), scores


def method_of(node) -> str:
    method = param_choice(node, "method", METHODS, "HARD")
    if method == "GAUSSIAN" and not B.number(node, "soft_nms_sigma", 0.0) > 0:
        raise B.fail(node, f"GAUSSIAN needs soft_nms_sigma > 0, got {node.get_param('soft_nms_sigma', 0.0)!r}")
    return "HARD" if method == "LINEAR" else method


class Overlaps:
    """Areas and intersections of one class's boxes, as the tool chain computes them
    (float, or integers with the areas' shift)."""

    def __init__(self, boxes: torch.Tensor, shift, soft: bool = False):
        self.y0, self.x0, self.y1, self.x1 = boxes.unbind(-1)
        self.shift = shift
        area = torch.abs((self.y1 - self.y0) * (self.x1 - self.x0))
        if shift is not None:
            area = (area if soft else B.wrap_int32(area)) >> shift
        self.areas = area

    def inter(self, i, rest) -> torch.Tensor:
        def side(a0, a1):
            lo_a, hi_a = torch.min(a0[i], a1[i]), torch.max(a0[i], a1[i])
            lo_b, hi_b = torch.min(a0[rest], a1[rest]), torch.max(a0[rest], a1[rest])
            return torch.clamp(torch.min(hi_a, hi_b) - torch.max(lo_a, lo_b), min=0)
        inter = side(self.x0, self.x1) * side(self.y0, self.y1)
        return inter if self.shift is None else B.wrap_int32(inter) >> self.shift

    def union(self, i, rest, inter) -> torch.Tensor:
        return self.areas[i] + self.areas[rest] - inter


def hard_nms(node, boxes, scores, cap: int, threshold) -> list:
    """Indices of the kept boxes of one class, in the order they are kept: the tool chain's
    loop (the best box left kept, the boxes it overlaps dropped), with the overlaps of a
    block of candidates against the boxes after them computed at once (every pair's test
    is elementwise, so it does not depend on which others are computed with it)."""
    iou = node.get_param("iou_threshold") if node.quantized else B.number(node, "iou_threshold")
    ov = Overlaps(boxes, int_param(node, "areas_shift") if node.quantized else None)
    order = B.tool_chain_argsort(scores, descending=True)
    at_most = (scores.float() <= threshold)[order].cpu().numpy()   # float32, the threshold too
    alive = numpy.ones(order.numel(), dtype=bool)
    kept = []
    for start in range(0, order.numel(), NMS_BLOCK):
        rows = start + numpy.flatnonzero(alive[start:start + NMS_BLOCK])
        if not rows.size:
            continue
        r, c = order[torch.from_numpy(rows).to(order.device)][:, None], order[None, start:]
        inter = ov.inter(r, c)
        union = ov.union(r, c, inter)
        limit = (union * iou) >> int_param(node, "iou_thresh_shift") if node.quantized else union * iou
        survive = (inter <= limit).cpu().numpy()
        for row, p in enumerate(rows.tolist()):
            if not alive[p]:
                continue
            if at_most[p]:
                return kept
            kept.append(int(order[p]))
            if len(kept) >= cap:
                return kept
            alive[p + 1:] &= survive[row, p + 1 - start:]
    return kept


def soft_nms(node, boxes, scores, cap: int, threshold) -> tuple:
    """(indices, scores) of the kept boxes of one class, GAUSSIAN."""
    ov = Overlaps(boxes, int_param(node, "areas_shift") if node.quantized else None, soft=True)
    if node.quantized:
        scale_lut = node.get_constant("gaussian_scale_lut").betensor.to(torch.int64)
        shift_lut = node.get_constant("gaussian_shift_lut").betensor.to(torch.int64)
        top = (1 << int_param(node, "soft_nms_sigma_in_shift")) - 1
    else:
        sigma = -0.5 / B.number(node, "soft_nms_sigma")
    candidates = (scores.float() > threshold).nonzero().reshape(-1).tolist()   # float32, as the tool chain
    values = scores[candidates].clone()
    begin = [0] * len(candidates)
    kept, kept_scores = [], []
    while len(kept) < cap and candidates:
        a = int(torch.argmax(values))
        box, value = candidates[a], values[a].clone()
        for bid in kept[begin[a]:]:
            inter = ov.inter(box, bid)
            union = ov.union(box, bid, inter)
            if node.quantized:
                iou = torch.where(union == 0, 0, inter) * top // torch.where(union == 0, 1, union)
                value = B.wrap_int32(value * scale_lut[iou]) >> shift_lut[iou]
            else:
                iou = torch.where(union == 0, torch.zeros_like(inter), inter / union)
                value = value * torch.exp(sigma * iou * iou)
            if bool(value.float() <= threshold):
                break
        begin[a] = len(kept)
        if bool(value == values[a]):
            kept.append(box)
            kept_scores.append(value)
        if bool(value == values[a]) or bool(value.float() <= threshold):
            del candidates[a], begin[a]
            values = torch.cat([values[:a], values[a + 1:]])
        else:
            values[a] = value
    return kept, kept_scores


def one_sample(node, boxes, counts, total, scores, method: str, threshold, rooms):
    room_boxes, room_classes = rooms
    cap = int_param(node, "max_output_size", room_boxes, minimum=1)
    out_boxes = torch.zeros((room_boxes, 4), dtype=torch.float64 if node.quantized else boxes.dtype)
    out_scores = torch.zeros(room_boxes, dtype=out_boxes.dtype)
    out_counts = torch.zeros(room_classes, dtype=torch.int64)
    out_keep = torch.zeros(room_boxes, dtype=torch.int64)
    start = filled = 0
    for c in range(int(total)):
        n = int(counts[c]) if c < counts.numel() else -1
        if n == 0:
            continue
        if n < 0 or c >= min(counts.numel(), room_classes) or start + n > boxes.shape[0]:
            raise B.fail(node, f"class slot {c} with {n} boxes does not fit {boxes.shape[0]} boxes and "
                               f"{room_classes} class slots")
        cls_boxes, cls_scores = boxes[start:start + n], scores[start:start + n]
        if method == "GAUSSIAN":
            kept, kept_scores = soft_nms(node, cls_boxes, cls_scores, cap, threshold)
        else:
            kept = hard_nms(node, cls_boxes, cls_scores, cap, threshold)
            kept_scores = cls_scores[kept]
        take = min(len(kept), room_boxes - filled)
        index = torch.tensor(kept[:take], dtype=torch.int64, device=boxes.device)
        out_boxes[filled:filled + take] = cls_boxes[index].to(out_boxes.dtype).cpu()
        if take:
            out_scores[filled:filled + take] = torch.stack(list(kept_scores[:take])).to(out_scores.dtype).cpu()
        out_keep[filled:filled + take] = index.cpu()
        out_counts[c] = take
        start, filled = start + n, filled + take
    if node.quantized:   # the kept boxes onto the top's grid
        out_boxes = B.wrap_int32(out_boxes.to(torch.int64) * int_param(node, "scale_value")) \
            >> int_param(node, "shift_value")
    device = boxes.device
    return out_boxes.to(device), out_counts.to(device), out_scores.to(device), out_keep.to(device)


@op_register(OpType.NMS, "1.0")
def nms_forward(self, *args):
    boxes, counts, total, scores = checked_inputs(self)
    method = method_of(self)
    rooms = B.top_size(self, 0, 1), B.top_size(self, 1, 1)
    if self.quantized:
        boxes = boxes.to(torch.int64) + int(self.inputs[0].zerop)
        scores = scores.to(torch.int64)
        threshold = float(int_param(self, "score_threshold"))
    else:
        threshold = B.number(self, "score_threshold", float("-inf"))
    return B.set_tops(self, [one_sample(self, boxes[b], counts[b], total[b], scores[b], method, threshold, rooms)
                             for b in range(boxes.shape[0])], (1, 3))


# ---- quantization -------------------------------------------------------------------------
def gaussian_tables(sigma: float):
    """(uint16 multipliers, uint8 shifts) of exp(-0.5 / sigma * (i / 255)^2), i = 0..255."""
    top = (1 << SIGMA_SHIFT) - 1
    decay = torch.exp(-0.5 / sigma * (torch.arange(top + 1, dtype=torch.float32) / top) ** 2)
    return qmath.scale_approximation(decay, 16)


def areas_shift(bits: int) -> int:
    """The tool chain's 13 for 16-bit boxes; narrower boxes keep more of their areas' bits
    (2 * bits - 19, at least 0: 8-bit boxes' areas whole), as much as keeps union *
    iou_threshold within int32."""
    return min(AREAS_SHIFT, max(0, 2 * bits - 19))


@quant_register(OpType.NMS, "1.0")
def nms_quantize(self, *args):
    QT.check_quantized_inputs(self)
    boxes, _, _, scores = self.inputs
    method = method_of(self)
    iou = B.number(self, "iou_threshold")
    extent = float(boxes.scale)
    if B.flag(self, "center_point_box", False) and "image_height" in self.params and "image_width" in self.params:
        extent = float(max(int_param(self, "image_height"), int_param(self, "image_width")))
    largest = (boxes.qmax + float(boxes.zerop)) / float(boxes.scale)
    whole_units = not (extent <= int(float(boxes.scale)) or largest <= 1.0)
    ratio = 1.0 / float(boxes.scale) if whole_units else extent / float(boxes.scale)
    m, s = qmath.scale_approximation(ratio, 16, force_shift_positive=self.force_shift_positive)
    threshold = B.number(self, "score_threshold", float("-inf"))
    if method == "GAUSSIAN":
        multipliers, shifts = gaussian_tables(B.number(self, "soft_nms_sigma"))
        fields.set_constant(self, "gaussian_scale_lut", multipliers, Dtype.UINT16)
        fields.set_constant(self, "gaussian_shift_lut", shifts, Dtype.UINT8)
        self.params["soft_nms_sigma_in_shift"] = SIGMA_SHIFT
    self.params.update(iou_thresh_shift=IOU_SHIFT, iou_threshold=int(iou * (1 << IOU_SHIFT)),
                       areas_shift=areas_shift(boxes.dtype.bits), scale_value=int(m), shift_value=int(s),
                       scale_type=fields.multiplier_dtype(16).value, shift_type=fields.shift_dtype(s).value,
                       score_threshold=scores.dtype.qmin - 1 if threshold == -math.inf
                       else B.quantize_number(threshold, scores))
    out_boxes, out_counts, out_scores, out_keep = self.outputs
    QT.copy_quantization(boxes, out_boxes)
    out_boxes.scale, out_boxes.zerop = (1.0 if whole_units else extent), 0
    QT.copy_quantization(scores, out_scores)
    for t in (out_counts, out_keep):
        index_output_quantization(self, t, 16)
