"""Detection post-processing after the boxes are decoded: NMS, FilterBoxes, PostNMS1
(docs/ir-ops.md, "Detection post-processing"). Float forwards as the tool chain computes
them; integer ones on the codes, with the tool chain's int32 products
(two's complement wrap-around) and its score order (scoresort.py).

NMS       per class slot c (boxes[start:start + count[c]]): the scores in the tool chain's
          descending order; the best kept while above score_threshold, the rest dropped
          when their intersection exceeds iou * union (integers: areas and intersections
          >> areas_shift, the limit (union * iou_threshold) >> iou_thresh_shift); GAUSSIAN
          decays the best candidate's score against the boxes kept since it was last seen
          (integers: s * gaussian_scale_lut[i] >> gaussian_shift_lut[i], i = inter * 255 //
          union), keeping it when nothing changed. Kept boxes (q + zp) * scale_value >>
          shift_value.
FilterBoxes  per class slot, the boxes whose score > score_threshold, height >= min_size[0]
          and width >= min_size[1] (codes and differences of codes in integers), packed,
          cut at maxnum.
PostNMS1  box offset(c) + keep[j] for the kept index j of slot c (offset: the kept counts
          before c), the first proposal_cnt; normalized: / max(image_height, image_width),
          integers (q + zp) * nor_box_scale_h|w >> nor_box_shift_h|w (y|x) into the top."""
import math

import numpy as np

from ..intmath import requantize
from .scoresort import tool_chain_order
from .stage import int_param


def wrap32(x) -> np.ndarray:
    """int64 integers as an int32 holds them after the tool chain's int32 arithmetic."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def number(layer, key, default=None) -> float:
    value = layer.param(key) if default is None else layer.param(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise layer.error(f"'{key}' must be a number, got {value!r}", key)
    return float(value)


def room(layer, top: int) -> int:
    if len(layer.top_shapes) <= top or len(layer.top_shapes[top]) < 2:
        raise layer.error(f"top {top} needs a shape of at least 2 axes", "layer_top_shape")
    return int(layer.top_shapes[top][1])


def clamp_tops(layer, tops):
    """Integer tops clamped to their dtypes (the tool chain fits each top to its dtype)."""
    return [np.clip(np.asarray(y, np.int64), t.qmin, t.qmax) for y, t in zip(tops, layer.top_types)]


def _count(layer, xs, n_in: int, n_out: int):
    if len(xs) != n_in or len(layer.tops) != n_out:
        raise layer.error(f"takes {n_in} inputs and gives {n_out} tops, the IR has {len(xs)} and {len(layer.tops)}")


# ---- NMS --------------------------------------------------------------------------------------
class _Boxes:
    """One class's boxes: areas and intersections, floats or integers >> shift."""

    def __init__(self, b: np.ndarray, shift, wrap: bool):
        self.b, self.shift = b, shift
        area = np.abs((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))
        self.area = area if shift is None else (wrap32(area) if wrap else area) >> shift

    def inter(self, i, rest):
        b = self.b
        sides = []
        for a0, a1 in ((1, 3), (0, 2)):
            lo_i, hi_i = min(b[i, a0], b[i, a1]), max(b[i, a0], b[i, a1])
            lo_r, hi_r = np.minimum(b[rest, a0], b[rest, a1]), np.maximum(b[rest, a0], b[rest, a1])
            sides.append(np.maximum(np.minimum(hi_i, hi_r) - np.maximum(lo_i, lo_r), 0))
        inter = sides[0] * sides[1]
        return inter if self.shift is None else wrap32(inter) >> self.shift


def _hard(layer, b, s, cap, threshold, integer):
    iou = int_param(layer, "iou_threshold") if integer else number(layer, "iou_threshold")
    boxes = _Boxes(b, int_param(layer, "areas_shift") if integer else None, True)
    order = tool_chain_order(s, True, integer)
    kept = []
    while order.size:
        i = int(order[0])
        if np.float32(s[i]) <= threshold:
            break
        kept.append(i)
        if len(kept) >= cap:
            break
        rest = order[1:]
        inter = boxes.inter(i, rest)
        union = boxes.area[i] + boxes.area[rest] - inter
        limit = (union * iou) >> int_param(layer, "iou_thresh_shift") if integer else union * iou
        order = rest[inter <= limit]
    return kept, [s[k] for k in kept]


def _soft(layer, b, s, cap, threshold, integer):
    boxes = _Boxes(b, int_param(layer, "areas_shift") if integer else None, False)
    if integer:
        scales, shifts = layer.const("gaussian_scale_lut"), layer.const("gaussian_shift_lut")
        top = (1 << int_param(layer, "soft_nms_sigma_in_shift")) - 1
    else:
        sigma = -0.5 / number(layer, "soft_nms_sigma")
    candidates = list(np.nonzero(s.astype(np.float32) > threshold)[0])
    values = [s[c] for c in candidates]
    begin = [0] * len(candidates)
    kept, kept_scores = [], []
    while len(kept) < cap and candidates:
        a = int(np.argmax(values))
        box, value = candidates[a], values[a]
        for other in kept[begin[a]:]:
            inter = boxes.inter(box, np.array([other]))[0]
            union = boxes.area[box] + boxes.area[other] - inter
            if integer:
                i = (0 if union == 0 else inter) * top // (1 if union == 0 else union)
                value = int(wrap32(value * scales[i]) >> shifts[i])
            else:
                iou = 0.0 if union == 0 else inter / union
                value = value * np.exp(sigma * iou * iou)
            if np.float32(value) <= threshold:
                break
        begin[a] = len(kept)
        same = value == values[a]
        if same:
            kept.append(box)
            kept_scores.append(value)
        if same or np.float32(value) <= threshold:
            del candidates[a], begin[a], values[a]
        else:
            values[a] = value
    return kept, kept_scores


def _nms(layer, xs, integer: bool, infos=None):
    _count(layer, xs, 4, 4)
    boxes, counts, total, scores = xs
    n = boxes.shape[0]
    scores = scores.reshape(n, -1)
    method = str(layer.param("method", "HARD")).upper()
    if method not in ("HARD", "GAUSSIAN", "LINEAR"):
        raise layer.error(f"unsupported method '{method}' (supported: HARD, GAUSSIAN, LINEAR)", "method")
    room_boxes, room_classes = room(layer, 0), room(layer, 1)
    cap = int_param(layer, "max_output_size", room_boxes)
    if integer:
        boxes, threshold = boxes + np.int64(infos[0].quant(layer)[1]), np.float32(int_param(layer, "score_threshold"))
    else:
        threshold = np.float32(number(layer, "score_threshold", -math.inf))
    kind = np.int64 if integer else boxes.dtype
    out = [np.zeros((n, room_boxes, 4), kind), np.zeros((n, room_classes), np.int64),
           np.zeros((n, room_boxes), kind if integer else scores.dtype), np.zeros((n, room_boxes), np.int64)]
    for s in range(n):
        start = filled = 0
        for c in range(int(np.asarray(total[s]).reshape(-1)[0])):
            k = int(counts[s, c]) if c < counts.shape[1] else -1
            if k == 0:
                continue
            if k < 0 or c >= room_classes or start + k > boxes.shape[1]:
                raise layer.error(f"class slot {c} with {k} boxes does not fit {boxes.shape[1]} boxes and "
                                  f"{room_classes} class slots")
            b, sc = boxes[s, start:start + k], scores[s, start:start + k]
            kept, kept_scores = (_soft if method == "GAUSSIAN" else _hard)(layer, b, sc, cap, threshold, integer)
            take = min(len(kept), room_boxes - filled)
            out[0][s, filled:filled + take] = b[kept[:take]]
            out[2][s, filled:filled + take] = kept_scores[:take]
            out[3][s, filled:filled + take] = kept[:take]
            out[1][s, c] = take
            start, filled = start + k, filled + take
    if integer:
        out[0] = wrap32(out[0] * int_param(layer, "scale_value")) >> int_param(layer, "shift_value")
        return clamp_tops(layer, out)
    return out


def nms_float(layer, xs, infos):
    return _nms(layer, xs, False)


def nms_int(layer, xs, infos):
    return _nms(layer, xs, True, infos)


# ---- FilterBoxes ------------------------------------------------------------------------------
def _filter(layer, xs, integer: bool):
    _count(layer, xs, 5, 5)
    boxes, scores, counts, labels, total = xs
    n, maxnum = boxes.shape[0], int_param(layer, "maxnum")
    scores = scores.reshape(n, -1)
    min_size = layer.param("min_size")
    if not isinstance(min_size, list) or len(min_size) != 2:
        raise layer.error(f"min_size must be [h, w], got {min_size!r}", "min_size")
    if integer:
        threshold, (min_h, min_w) = int_param(layer, "score_threshold"), [int(v) for v in min_size]
    else:
        threshold, (min_h, min_w) = number(layer, "score_threshold", -math.inf), [float(v) for v in min_size]
    out = [np.zeros((n, maxnum, 4), boxes.dtype), np.zeros((n, maxnum), scores.dtype), np.zeros_like(counts),
           np.zeros_like(labels), np.zeros((n, 1), np.int64)]
    for s in range(n):
        start = filled = used = 0
        for c in range(int(np.asarray(total).reshape(n, -1)[s, 0])):
            k = int(counts[s, c]) if c < counts.shape[1] else -1
            if k == 0:
                continue
            if k < 0 or start + k > boxes.shape[1]:
                raise layer.error(f"class slot {c} with {k} boxes does not fit {boxes.shape[1]} boxes")
            b, sc = boxes[s, start:start + k], scores[s, start:start + k]
            start += k
            valid = (sc > threshold) & (b[:, 2] - b[:, 0] >= min_h) & (b[:, 3] - b[:, 1] >= min_w)
            found = int(valid.sum())
            if not found:
                continue
            take = min(found, maxnum - filled)
            out[0][s, filled:filled + take] = b[valid][:take]
            out[1][s, filled:filled + take] = sc[valid][:take]
            out[2][s, used], out[3][s, used] = take, labels[s, c]
            filled, used = filled + take, used + 1
            if filled >= maxnum:
                break
        out[4][s, 0] = used
    return clamp_tops(layer, out) if integer else out


def filterboxes_float(layer, xs, infos):
    return _filter(layer, xs, False)


def filterboxes_int(layer, xs, infos):
    return _filter(layer, xs, True)


# ---- PostNMS1 ---------------------------------------------------------------------------------
def _gather(layer, xs):
    _count(layer, xs, 3, 2)
    boxes, keep, counts = xs
    n, count = boxes.shape[0], int_param(layer, "proposal_cnt")
    out = np.zeros((n, count, 4), boxes.dtype)
    for s in range(n):
        filled = offset = 0
        for k in counts[s].tolist():
            k = int(k)
            for j in range(max(k, 0)):
                if filled >= count or filled >= keep.shape[1]:
                    break
                index = offset + int(keep[s, filled])
                if index >= boxes.shape[1]:
                    break
                out[s, filled] = boxes[s, index]
                filled += 1
            offset += k
    return out


def postnms1_float(layer, xs, infos):
    out = _gather(layer, xs)
    side = max(int_param(layer, "image_height"), int_param(layer, "image_width"))
    return [out, out / side]


def postnms1_int(layer, xs, infos):
    out = _gather(layer, xs)
    zp_in = np.int64(infos[0].quant(layer)[1])
    zp_out, lo, hi = int(layer.top_zps[1]), *layer.top_range(1)
    normalized = np.zeros_like(out)
    for axis, key in ((0, "h"), (1, "w")):
        normalized[..., axis::2] = requantize(layer, out[..., axis::2] + zp_in,
                                              int_param(layer, f"nor_box_scale_{key}"),
                                              int_param(layer, f"nor_box_shift_{key}"), zp_out, lo, hi)
    return clamp_tops(layer, [np.clip(out, *layer.top_range(0)), normalized])


FLOAT = {"NMS": nms_float, "FilterBoxes": filterboxes_float, "PostNMS1": postnms1_float}
INT = {"NMS": nms_int, "FilterBoxes": filterboxes_int, "PostNMS1": postnms1_int}
