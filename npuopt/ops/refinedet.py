"""RefineDetDetection: Caffe RefineDet's detection output, as the parser writes it (its
Caffe front end; the tool chain's optimizer has no such op). Inputs, in the parser's order:
the anchor refinement module's objectness [B, N, 2] (softmax), the detection module's class
scores [B, N, C] (softmax, class 0 the background), the refinement's box offsets [B, N, 4],
the detection's [B, N, 4], the N priors [1 or B, N, 4] (xmin, ymin, xmax, ymax, as Caffe's
PriorBox; a constant); params obj_thresh, conf_thresh, pre_nms_topk, post_nms_topk. The one
top [B, post_nms_topk, 4] holds boxes, as the parser declares it.

npuopt's definition (Caffe's RefineDet, with what the parser keeps): each prior is refined
by its refinement offsets, then decoded by its detection offsets (centre-size coding with
Caffe's variances 0.1, 0.1, 0.2, 0.2: cx += 0.1 * dx * w, w *= e^(0.2 * dw)); a prior whose
objectness is below obj_thresh is background; each class c >= 1 keeps the scores above
conf_thresh, its best pre_nms_topk, then greedy NMS (IoU > 0.45, the parser's value,
suppresses; normalized areas); the kept (box, class) pairs of all classes by score
(ties: lower class, then lower prior first), the best post_nms_topk boxes (xmin, ymin, xmax,
ymax), zeros past them.

Kept in float: the tool chain has no integer form of it (no reader of an integer
RefineDetDetection exists to agree with), so npuopt registers no quantize function."""
import torch

from ..dtype import computing_float
from ..registry import OpType, op_register
from . import _boxes as B
from ._detection import count_param, greedy_keep, room

VARIANCES = (0.1, 0.1, 0.2, 0.2)
IOU_THRESHOLD = 0.45


def descending(scores: torch.Tensor) -> torch.Tensor:
    """The order of `scores` from the largest down, ties by position (a stable sort)."""
    return torch.sort(scores, descending=True, stable=True).indices


def checked(node):
    B.count_io(node, 5, 1)
    arm_conf, odm_conf, arm_loc, odm_loc, priors = (t.betensor for t in node.inputs)
    b, n = arm_conf.shape[0], arm_conf.shape[1] if arm_conf.dim() == 3 else -1
    shapes_ok = arm_conf.dim() == 3 and arm_conf.shape[2] == 2 and odm_conf.dim() == 3 and \
        tuple(odm_conf.shape[:2]) == (b, n) and odm_conf.shape[2] >= 2 and \
        all(t.dim() == 3 and tuple(t.shape) == (b, n, 4) for t in (arm_loc, odm_loc)) and \
        priors.dim() == 3 and priors.shape[0] in (1, b) and tuple(priors.shape[1:]) == (n, 4)
    if not shapes_ok:
        raise B.fail(node, f"needs objectness [B, N, 2], class scores [B, N, C], offsets [B, N, 4] twice and "
                                f"priors [1, N, 4], got {[list(t.betensor.shape) for t in node.inputs]}")
    post = count_param(node, "post_nms_topk")
    if room(node, 0, 1, post) != post:
        raise B.fail(node, f"post_nms_topk {post} does not fit the top {list(node.outputs[0].ir_shape)}")
    return post, count_param(node, "pre_nms_topk"), B.number(node, "obj_thresh"), B.number(node, "conf_thresh")


def decoded(priors: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Centre-size decoding of corner boxes [..., 4] by offsets (dx, dy, dw, dh)."""
    w, h = priors[..., 2] - priors[..., 0], priors[..., 3] - priors[..., 1]
    cx, cy = (priors[..., 0] + priors[..., 2]) / 2, (priors[..., 1] + priors[..., 3]) / 2
    cx = VARIANCES[0] * offsets[..., 0] * w + cx
    cy = VARIANCES[1] * offsets[..., 1] * h + cy
    w = torch.exp(VARIANCES[2] * offsets[..., 2]) * w
    h = torch.exp(VARIANCES[3] * offsets[..., 3]) * h
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)


def class_nms(boxes: torch.Tensor, limit: int) -> torch.Tensor:
    """Greedy NMS of boxes in their order (IoU > 0.45 suppresses); positions of the first
    `limit` kept."""
    areas = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)

    def survivors(i: int) -> torch.Tensor:
        lo, hi = torch.maximum(boxes[i, :2], boxes[i + 1:, :2]), torch.minimum(boxes[i, 2:], boxes[i + 1:, 2:])
        inter = (hi - lo).clamp(min=0).prod(dim=-1)
        return ~(inter > IOU_THRESHOLD * (areas[i] + areas[i + 1:] - inter))
    return greedy_keep(boxes.shape[0], limit, survivors)


def detections(boxes, scores, objectness, pre: int, post: int, obj_thresh: float, conf_thresh: float):
    """One image's kept boxes, best first."""
    found_scores, found_priors = [], []
    live = objectness >= obj_thresh
    for c in range(1, scores.shape[1]):
        candidates = torch.nonzero(live & (scores[:, c] > conf_thresh)).reshape(-1)
        candidates = candidates[descending(scores[candidates, c])[:pre]]
        kept = candidates[class_nms(boxes[candidates], post)]
        found_scores.append(scores[kept, c])
        found_priors.append(kept)
    order = descending(torch.cat(found_scores))[:post]   # listed class by class: ties keep (class, NMS) order
    return boxes[torch.cat(found_priors)[order]]


@op_register(OpType.RefineDetDetection, "1.0")
def refinedet_forward(self, *args):
    post, pre, obj_thresh, conf_thresh = checked(self)
    arm_conf, odm_conf, arm_loc, odm_loc, priors = (computing_float(t.betensor) for t in self.inputs)
    refined = decoded(priors.expand_as(arm_loc), arm_loc)
    boxes = decoded(refined, odm_loc)
    out = torch.zeros(boxes.shape[0], post, 4, dtype=boxes.dtype)
    for b in range(boxes.shape[0]):
        kept = detections(boxes[b], odm_conf[b], arm_conf[b, :, 1], pre, post, obj_thresh, conf_thresh)
        out[b, :kept.shape[0]] = kept
    self.outputs[0].betensor = out
    return out
