"""FilterBoxes: the boxes of each class slot whose score passes `score_threshold` (default
-inf) and whose height and width reach `min_size` [h, w], packed class after class (what
the parser writes between DetectionOutput and NMS).

Inputs and tops alike: boxes [B, P, 4] (ymin, xmin, ymax, xmax), scores [B, P], boxes per
class slot [B, K], the slots' classes [B, K], the slots used [B, 1]. `maxnum`: the most
boxes kept (top 0's size); the class that reaches it is cut there and the rest left out.
Quantized: the same on the codes (boxes, scores and counts keep their inputs' grids),
`score_threshold` and `min_size` on those grids (min_size as a difference of codes: its
value times the boxes' scale, with no zero point)."""
import math

import torch

from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._movement import int_param


def checked_inputs(node):
    B.count_io(node, 5, 5)
    boxes, scores, counts, labels, total = (t.betensor for t in node.inputs)
    B.shape_is(node, boxes, "input 0 (boxes)", 3, 4)
    n = boxes.shape[0]
    if scores.reshape(n, -1).shape[1] != boxes.shape[1] or counts.dim() != 2 or labels.shape != counts.shape \
            or total.numel() != n:
        raise B.fail(node, f"inputs of shapes {[list(t.betensor.shape) for t in node.inputs]} do not fit boxes "
                           f"[B, P, 4], scores [B, P], boxes per class [B, K], classes [B, K], classes used [B, 1]")
    room = int_param(node, "maxnum", minimum=0)
    if room != B.top_size(node, 0, 1) or room != B.top_size(node, 1, 1):
        raise B.fail(node, f"maxnum {room} differs from tops 0 and 1's {B.top_size(node, 0, 1)} boxes")
    return boxes, scores.reshape(n, -1), counts.to(torch.int64), labels.to(torch.int64), total.reshape(-1), room


def one_sample(node, boxes, scores, counts, labels, total, room: int, threshold, min_h, min_w):
    out_boxes = torch.zeros((room, 4), dtype=boxes.dtype, device=boxes.device)
    out_scores = torch.zeros(room, dtype=scores.dtype, device=scores.device)
    out_counts, out_labels = torch.zeros_like(counts), torch.zeros_like(labels)
    start = filled = used = 0
    for c in range(int(total)):
        n = int(counts[c]) if c < counts.numel() else -1
        if n == 0:
            continue
        if n < 0 or start + n > boxes.shape[0]:
            raise B.fail(node, f"class slot {c} with {n} boxes does not fit {boxes.shape[0]} boxes and "
                               f"{counts.numel()} class slots")
        box, score = boxes[start:start + n], scores[start:start + n]
        valid = (score > threshold) & ((box[:, 2] - box[:, 0]) >= min_h) & ((box[:, 3] - box[:, 1]) >= min_w)
        k = int(valid.sum())
        start += n
        if k == 0:
            continue
        full = filled + k >= room
        k = min(k, room - filled)
        out_boxes[filled:filled + k] = box[valid][:k]
        out_scores[filled:filled + k] = score[valid][:k]
        out_counts[used], out_labels[used] = k, labels[c]
        filled, used = filled + k, used + 1
        if full:
            break
    return out_boxes, out_scores, out_counts, out_labels, torch.tensor([used], device=boxes.device)


@op_register(OpType.FilterBoxes, "1.0")
def filterboxes_forward(self, *args):
    boxes, scores, counts, labels, total, room = checked_inputs(self)
    min_h, min_w = B.numbers(self, "min_size", 2)
    if self.quantized:
        threshold, min_h, min_w = int_param(self, "score_threshold"), int(min_h), int(min_w)
    else:
        threshold = B.number(self, "score_threshold", -math.inf)
    return B.set_tops(self, [one_sample(self, boxes[b], scores[b], counts[b], labels[b], total[b], room, threshold,
                                        min_h, min_w) for b in range(boxes.shape[0])], (2, 3, 4))


@quant_register(OpType.FilterBoxes, "1.0")
def filterboxes_quantize(self, *args):
    QT.check_quantized_inputs(self)
    for src, dst in zip(self.inputs, self.outputs):
        QT.copy_quantization(src, dst)
    boxes, scores = self.inputs[:2]
    span = boxes.qmax - boxes.qmin
    min_size = [int(qmath.quantize(torch.tensor([v]), boxes.scale, 0, -span, span).item())
                for v in B.numbers(self, "min_size", 2)]
    threshold = B.number(self, "score_threshold", -math.inf)
    self.params["min_size"] = min_size
    self.params["score_threshold"] = scores.dtype.qmin - 1 if threshold == -math.inf \
        else B.quantize_number(threshold, scores)
