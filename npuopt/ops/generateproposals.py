"""GenerateProposals: Caffe Faster R-CNN's proposal layer, as the parser writes it (its
Caffe front end): input 0 the objectness [B, H, W, A], input 1 the deltas [B, H, W, 4A]
(tx, ty, tw, th per anchor), input 2 the image info (unused); constant `weights` the A base
anchors (x1, y1, x2, y2), or already one (w, h, x centre, y centre) per box; params
pre_nms_topn, post_nms_topn, min_size, iou_threshold, image_height, image_width. Tops:
scores [B, P], boxes [B, P, 4] (x1, y1, x2, y2), zeros [B, P, 1] (the batch index), the box
count [B, 1]; P = post_nms_topn.

Float (the tool chain's): the base anchors tiled every 16 pixels (box k = cell * A + a, the
cell's x offset 16 * (cell mod H), y offset 16 * (cell div H): the map's rows and columns,
transposed as the tool chain tiles them, which is the usual tiling on a square map);
w = e^tw * wa, h = e^th * ha, centres tx * wa + xc, ty * ha + yc; corners clamped to
[0, image - 1]. The pre_nms_topn best scores (a stable sort, ties by position), those whose
width and height (x2 - x1 + 1) exceed min_size, then greedy NMS in that order (IoU with
+1 areas > iou_threshold suppresses), the first post_nms_topn kept.

Quantized (the tool chain's): the tables `xy_lut`, `wh_lut` (int32 holding int16 values; the
deltas and e^delta at 2^delta_shift), the anchors int16 at the coordinates' scale 2^k
(`anchor_scale`); h = (wh_lut[th] * ha) >> delta_shift, cy = ((xy_lut[ty] * ha) >>
delta_shift) + yc, corners cy -+ trunc(h / 2) clamped to [0, (image - 1) * 2^k]; the size
test x2 - x1 > min_size (the quantized min_size); NMS in integers: areas and intersections
>> 15, suppressed when inter > (union * iou_threshold) >> 11 (iou_threshold on 2^11 steps).
The tool chain orders equal scores by an unstable sort; npuopt by position."""
import torch

from ..dtype import Dtype, computing_float
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ..tensor import PyTensor
from . import _boxes as B
from ._detection import check_room, count_param, floor_log2, greedy_keep, set_tops
from .proposal import INT16, power_of_two_scale

FEATURE_STRIDE = 16
AREA_SHIFT = 15
IOU_SHIFT = 11
ANCHOR_CONSTANTS = ("ycenter_a_q", "xcenter_a_q", "ha_q", "wa_q")


def checked(node):
    """(scores [B, n], deltas [B, n, 4], pre_nms_topn, post_nms_topn)."""
    B.count_io(node, 3, 4)
    scores, deltas = node.inputs[0].betensor, node.inputs[1].betensor
    if scores.dim() != 4 or deltas.dim() != 4 or deltas.shape[:3] != scores.shape[:3] or \
            deltas.shape[3] != 4 * scores.shape[3]:
        raise B.fail(node, f"needs scores [B, H, W, A] and deltas [B, H, W, 4A], got {list(scores.shape)} and "
                                f"{list(deltas.shape)}")
    pre, post = count_param(node, "pre_nms_topn"), count_param(node, "post_nms_topn")
    for i, axis in ((0, 1), (1, 1), (2, 1)):
        check_room(node, i, axis, post, "post_nms_topn")
    for key in ("min_size", "iou_threshold", "image_height", "image_width"):
        B.number(node, key)
    batch = scores.shape[0]
    return scores.reshape(batch, -1), deltas.reshape(batch, -1, 4), pre, post


def tiled_anchors(node, shape) -> torch.Tensor:
    """[H * W * A, 4] (w, h, x centre, y centre) of every box of scores of `shape` [B, H, W, A],
    from `weights`."""
    base = node.get_constant("weights").betensor.to(torch.float32)
    height, width = int(shape[1]), int(shape[2])
    boxes = height * width * int(shape[3])
    if base.dim() != 2 or base.shape[1] != 4:
        raise B.fail(node, f"weights must be anchors [A, 4], got {list(base.shape)}")
    if base.shape[0] == boxes:
        return base
    if base.shape[0] * height * width != boxes:
        raise B.fail(node, f"weights holds {base.shape[0]} anchors; the scores have {boxes // (height * width)} "
                                f"per cell")
    cell = torch.arange(height * width)
    x, y = (cell % height).float() * FEATURE_STRIDE, torch.div(cell, height, rounding_mode="floor").float() * \
        FEATURE_STRIDE
    shifts = torch.stack([x, y, x, y], dim=-1)
    boxes = (base.reshape(1, -1, 4) + shifts.reshape(-1, 1, 4)).reshape(-1, 4)
    wa = boxes[:, 2] - boxes[:, 0] + 1.0
    ha = boxes[:, 3] - boxes[:, 1] + 1.0
    return torch.stack([wa, ha, boxes[:, 0] + 0.5 * wa, boxes[:, 1] + 0.5 * ha], dim=-1)


def float_boxes(node, deltas: torch.Tensor) -> torch.Tensor:
    """[B, n, 4] (x1, y1, x2, y2); the coordinates' and deltas' statistics as placeholders."""
    anchors = tiled_anchors(node, node.inputs[0].betensor.shape)
    wa, ha, xa, ya = (anchors[:, i].to(deltas.dtype) for i in range(4))
    tx, ty, tw, th = deltas.unbind(-1)
    w, h = torch.exp(tw) * wa, torch.exp(th) * ha
    cy, cx = ty * ha + ya, tx * wa + xa
    bottom, right = B.number(node, "image_height") - 1, B.number(node, "image_width") - 1
    ymin, xmin = torch.clamp(cy - h / 2.0, 0, bottom), torch.clamp(cx - w / 2.0, 0, right)
    ymax, xmax = torch.clamp(cy + h / 2.0, 0, bottom), torch.clamp(cx + w / 2.0, 0, right)
    if not node.placeholders:
        node.placeholders += [PyTensor(f"{node.name}/coords"), PyTensor(f"{node.name}/box")]
    coords = [torch.cat([v.reshape(-1) for v in (ya, xa, ha, wa, ymin[b], ymax[b], xmin[b], xmax[b], cy[b], cx[b],
                                                 h[b], w[b], ty[b] * ha, tx[b] * wa)]) for b in range(deltas.shape[0])]
    node.placeholders[0].betensor = torch.cat(coords)
    node.placeholders[1].betensor = torch.cat([torch.cat([ty[b], tx[b], th[b], tw[b], torch.exp(th[b]),
                                                          torch.exp(tw[b])]) for b in range(deltas.shape[0])])
    return torch.stack([xmin, ymin, xmax, ymax], dim=-1)


def int_boxes(node, deltas: torch.Tensor) -> torch.Tensor:
    x_t = node.inputs[1]
    shift = int(node.get_param("delta_shift"))
    index = deltas.to(torch.int64) - qmath.integer_range(x_t.qbits, x_t.dtype.is_signed)[0]
    xy, _ = fields.read_lut(node, "xy_lut")
    wh, _ = fields.read_lut(node, "wh_lut")
    tx, ty = (qmath.lut_lookup(index[..., i], xy, x_t.qbits, 16, True) for i in (0, 1))
    tw, th = (qmath.lut_lookup(index[..., i], wh, x_t.qbits, 16, True) for i in (2, 3))
    ya, xa, ha, wa = (node.get_constant(k).betensor.reshape(-1).to(torch.int64) for k in ANCHOR_CONSTANTS)
    h, w = (th * ha) >> shift, (tw * wa) >> shift
    cy, cx = ((ty * ha) >> shift) + ya, ((tx * wa) >> shift) + xa
    scale = int(node.get_param("anchor_scale"))
    bottom = int(B.number(node, "image_height") * scale) - scale
    right = int(B.number(node, "image_width") * scale) - scale
    half_h, half_w = torch.div(h, 2, rounding_mode="trunc"), torch.div(w, 2, rounding_mode="trunc")
    return torch.stack([torch.clamp(cx - half_w, 0, right), torch.clamp(cy - half_h, 0, bottom),
                        torch.clamp(cx + half_w, 0, right), torch.clamp(cy + half_h, 0, bottom)], dim=-1)


def nms(node, boxes: torch.Tensor, limit: int) -> torch.Tensor:
    """Greedy NMS in the boxes' order (x1, y1, x2, y2), the first `limit` kept: float IoU with
    +1 sizes, or the integer test on areas >> 15 against iou_threshold on 2^11 steps."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    extent = 0 if node.quantized else 1
    areas = (x1 - x0 + extent) * (y1 - y0 + extent)
    if node.quantized:
        areas = areas >> AREA_SHIFT
        threshold = int(node.get_param("iou_threshold"))
    else:
        threshold = B.number(node, "iou_threshold")

    def survivors(i: int) -> torch.Tensor:
        rest = slice(i + 1, None)
        w = torch.clamp(torch.minimum(x1[i], x1[rest]) - torch.maximum(x0[i], x0[rest]) + extent, min=0)
        h = torch.clamp(torch.minimum(y1[i], y1[rest]) - torch.maximum(y0[i], y0[rest]) + extent, min=0)
        if node.quantized:
            inter = (w * h) >> AREA_SHIFT
            return inter <= (((areas[i] + areas[rest] - inter) * threshold) >> IOU_SHIFT)
        inter = w * h
        return inter / (areas[i] + areas[rest] - inter) <= threshold
    return greedy_keep(boxes.shape[0], limit, survivors)


@op_register(OpType.GenerateProposals, "1.0")
def generateproposals_forward(self, *args):
    scores, deltas, pre, post = checked(self)
    if self.quantized:
        boxes, scores = int_boxes(self, deltas), scores.to(torch.int64)
        min_size = int(self.get_param("min_size"))
        extent = 0
    else:
        boxes, scores = float_boxes(self, computing_float(deltas)), computing_float(scores)
        min_size = B.number(self, "min_size")
        extent = 1
    batch = scores.shape[0]
    out = [torch.zeros(batch, post, dtype=scores.dtype), torch.zeros(batch, post, 4, dtype=boxes.dtype),
           torch.zeros(batch, post, 1, dtype=boxes.dtype), torch.zeros(batch, 1, dtype=torch.int64)]
    for b in range(batch):
        order = B.tool_chain_argsort(scores[b], descending=True)[:pre]
        kept = boxes[b, order]
        sizes = kept[:, 2:] - kept[:, :2] + extent
        order = order[(sizes > min_size).all(dim=-1)]
        keep = order[nms(self, boxes[b, order], post)]
        out[0][b, :keep.numel()], out[1][b, :keep.numel()] = scores[b, keep], boxes[b, keep]
        out[3][b, 0] = keep.numel()
    return set_tops(self, out, 3)


# ---- quantize ------------------------------------------------------------------------------
def delta_table(x_t, k: int, exponential: bool, scale: float) -> torch.Tensor:
    """The tool chain's sampling: 2^k points from qmin to qmax (qmax + 1 when the zero point
    is 0) of the deltas' integers, int16 values."""
    top = x_t.dtype.qmax + (1 if int(x_t.zerop) == 0 else 0)
    real = qmath.dequantize(torch.linspace(x_t.dtype.qmin, top, steps=1 << k), x_t.scale, x_t.zerop)
    return qmath.quantize(torch.exp(real) if exponential else real, scale, 0, *INT16)


@quant_register(OpType.GenerateProposals, "1.0")
def generateproposals_quantize(self, *args):
    """The tool chain's: the coordinates at 2^floor(log2 s) of their 16-bit range, the tables
    at 2^floor(log2 s) of the deltas' and their exponentials' range, the scores on the input's
    grid; `weights` (the anchors with x2, y2 + 1, then the tables) and `anchors` int16 for the
    NPU's library."""
    QT.check_quantized_inputs(self)
    s_t, x_t = self.inputs[0], self.inputs[1]
    if x_t.qinvariant or x_t.is_per_channel or s_t.is_per_channel or x_t.qbits > 16 or not self.placeholders:
        raise QT.Unsupported(f"layer '{self.name}' (GenerateProposals): needs per-tensor inputs (deltas of at most "
                             f"16 bits) and calibrated coordinates")
    height, width = int(x_t.ir_shape[1]), int(x_t.ir_shape[2])
    coords = power_of_two_scale(self, self.placeholders[0])
    box = power_of_two_scale(self, self.placeholders[1])
    anchors = tiled_anchors(self, s_t.ir_shape)
    for i, key in zip((3, 2, 1, 0), ANCHOR_CONSTANTS):
        fields.set_constant(self, key, qmath.quantize(anchors[:, i], coords, 0, *INT16), Dtype.INT16)
    k = min(x_t.qbits, settings_of(self).lut_items_in_bits)
    xy, wh = delta_table(x_t, k, False, box), delta_table(x_t, k, True, box)
    fields.write_lut(self, xy, Dtype.INT32, "xy_lut")
    fields.write_lut(self, wh, Dtype.INT32, "wh_lut")
    p = self.params
    p["anchor_scale"] = int(coords)
    p["min_size"] = int((B.number(self, "min_size") - 1) * coords)
    p["iou_scale"] = 1 << IOU_SHIFT
    p["iou_threshold"] = int(B.number(self, "iou_threshold") * (1 << IOU_SHIFT))
    for key, image, size in (("height_stride", "image_height", height), ("width_stride", "image_width", width)):
        p[key] = int(torch.ceil(torch.tensor(B.number(self, image) / size)) * coords)
    p["delta_shift"] = p["roi_last_shift"] = floor_log2(box)
    library = anchors.clone()
    library[:, 2:] += 1
    library = qmath.quantize(library, coords, 0, *INT16).reshape(-1)
    fields.set_constant(self, "weights", torch.cat([library, wh, xy]), Dtype.INT16)
    fields.set_constant(self, "anchors", library, Dtype.INT16)
    QT.copy_quantization(s_t, self.outputs[0])
    for t in self.outputs[1:3]:
        QT.set_quantization(t, coords, 0, 0, 65535, 16, False)
    QT.set_quantization(self.outputs[3], 1.0, 0, 0, 65535, 16, False)
    self.outputs[3].qinvariant = True
