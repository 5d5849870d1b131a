"""Box decoding layers: DecodeBox, DetectionOutput, BoundingBox (docs/ir-ops.md, "Detection
post-processing"). Float forwards as the tool chain computes them; integer ones on the
codes with its int32 products (two's complement wrap-around).

DecodeBox  h = exp(th / v2) * ha clamped to [0, H], cy = ty / v0 * ha + ycenter, the box
           cy -+ h / 2 (clamped to the image when clip); integers: table lookups of the
           encodings' codes, h = lut_h * ha >> box_shift, cy = (lut_y * ha >> box_shift) +
           ycenter, cy -+ (h >> 1). The (box, class) pairs whose score (q + zp) passes the
           threshold, row by row; past the top's room the lowest-scored (the tool chain's
           ascending order); then class by class.
DetectionOutput  caffe_detection: encodings (tx, ty, tw, th), proposals (x0, y0, x1, y1),
           else y first; integers: h = ((clamp(lut_h * M1 >> d1) * ha) + 2^(s1-d1-1)) >>
           (s1 - d1), cy alike (M2, s2, d2) + requantize(center, M3, s3); boxes clamped to
           the image; the first pairs above the threshold, class by class.
BoundingBox  deltas on boxes, clamped to [0, 1]; integers at 32767 steps per unit."""
import math

import numpy as np

from ..intmath import lut_lookup, requantize
from .detection import clamp_tops, number, room, wrap32
from .scoresort import tool_chain_order
from .stage import int_param

ANCHORS = ("ycenter", "xcenter", "ha", "wa")
LUTS = ("ty_lut", "tx_lut", "th_lut", "tw_lut")
INT16 = (-32768, 32767)


def _floats(layer, key, n, default=None):
    value = layer.param(key) if default is None else layer.param(key, default)
    if not isinstance(value, list) or len(value) != n or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise layer.error(f"'{key}' must be a list of {n} numbers, got {value!r}", key)
    return [float(v) for v in value]


def _flag(layer, key, default: bool) -> bool:
    value = layer.param(key, default)
    if value not in (0, 1):
        raise layer.error(f"'{key}' must be true or false, got {value!r}", key)
    return bool(value)


def _look(layer, codes, info, name, signed: bool):
    """The tool chain's lookup of codes in table `name`, the result clamped to the table
    dtype's bits, signed or not as `signed` says."""
    bits = layer.const_types[name].bits
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return lut_lookup(layer, codes - info.dtype.qmin, layer.const(name), info.dtype.bits, lo, hi)


# ---- DecodeBox ----------------------------------------------------------------------------------
def _decode_float(layer, deltas, extent, clip):
    ya, xa, ha, wa = (layer.const(k).astype(np.float64).reshape(-1) for k in ANCHORS)
    v = _floats(layer, "variance", 4, [10.0, 10.0, 5.0, 5.0])
    ty, tx, th, tw = (deltas[..., i] / v[i] for i in range(4))
    h, w = np.clip(np.exp(th) * ha, 0, extent[0]), np.clip(np.exp(tw) * wa, 0, extent[1])
    cy, cx = ty * ha + ya, tx * wa + xa
    corners = [cy - h / 2., cx - w / 2., cy + h / 2., cx + w / 2.]
    return _clipped(corners, extent, clip)


def _clipped(corners, extent, clip):
    if clip:
        corners = [np.clip(c, 0, limit) for c, limit in zip(corners, extent * 2)]
    return np.stack(corners, -1)


def _decode_int(layer, codes, info, extent, clip):
    ty, tx, th, tw = (_look(layer, codes[..., i], info, name, info.dtype.signed)
                      for i, name in enumerate(LUTS))
    ya, xa, ha, wa = (layer.const(k).reshape(-1) for k in ANCHORS)
    shift = int_param(layer, "box_shift")
    h, w = np.clip(wrap32(th * ha) >> shift, 0, extent[0]), np.clip(wrap32(tw * wa) >> shift, 0, extent[1])
    cy, cx = (wrap32(ty * ha) >> shift) + ya, (wrap32(tx * wa) >> shift) + xa
    return _clipped([cy - (h >> 1), cx - (w >> 1), cy + (h >> 1), cx + (w >> 1)], extent, clip)


def _roi(layer, scores, boxes, threshold, class_num, integer):
    """One sample's five tops."""
    m, k_count, k_labels = room(layer, 0), room(layer, 1), room(layer, 4)
    m_scores = room(layer, 3)
    s = scores[:, scores.shape[1] - class_num:]
    box_ids, class_ids = np.nonzero(s > threshold)
    if box_ids.size > m:
        lowest = tool_chain_order(s[box_ids, class_ids], False, integer)[:m]
        box_ids, class_ids = box_ids[lowest], class_ids[lowest]
    by_class = np.argsort(class_ids, kind="stable")
    box_ids, class_ids = box_ids[by_class], class_ids[by_class]
    labels, counts = np.unique(class_ids, return_counts=True)
    if labels.size > min(k_count, k_labels):
        raise layer.error(f"{labels.size} classes do not fit the tops' {min(k_count, k_labels)} entries")
    out = [np.zeros((m, 4), boxes.dtype), np.zeros(k_count, np.int64), np.array([labels.size]),
           np.zeros(m_scores, s.dtype), np.zeros(k_labels, np.int64)]
    out[0][:box_ids.size] = boxes[box_ids]
    out[1][:counts.size], out[4][:labels.size] = counts, labels
    out[3][:box_ids.size] = s[box_ids, class_ids]
    return out


def _decodebox(layer, xs, infos, integer):
    if len(xs) != 2 or len(layer.tops) != 5:
        raise layer.error(f"takes 2 inputs and gives 5 tops, the IR has {len(xs)} and {len(layer.tops)}")
    scores, deltas = xs
    class_num = int_param(layer, "class_num")
    if not 1 <= class_num <= scores.shape[2]:
        raise layer.error(f"class_num {class_num} outside [1, {scores.shape[2]}]", "class_num")
    clip = _flag(layer, "clip", True)
    if integer:
        extent = (int_param(layer, "image_height"), int_param(layer, "image_width"))
        boxes = _decode_int(layer, deltas, infos[1], extent, clip)
        scores, threshold = scores + np.int64(infos[0].quant(layer)[1]), int_param(layer, "score_threshold_uint8")
    else:
        normalized = _flag(layer, "proposal_normalized", True)
        extent = (1.0, 1.0) if normalized else (float(int_param(layer, "image_height")),
                                                float(int_param(layer, "image_width")))
        boxes, threshold = _decode_float(layer, deltas, extent, clip), number(layer, "score_threshold")
    tops = [np.stack(t) for t in zip(*(_roi(layer, scores[b], boxes[b], threshold, class_num, integer)
                                        for b in range(scores.shape[0])))]
    return clamp_tops(layer, tops) if integer else tops


def decodebox_float(layer, xs, infos):
    return _decodebox(layer, xs, infos, False)


def decodebox_int(layer, xs, infos):
    return _decodebox(layer, xs, infos, True)


# ---- DetectionOutput ----------------------------------------------------------------------------
def _detection_inputs(layer, xs):
    if len(xs) != 3 or len(layer.tops) != 5:
        raise layer.error(f"takes 3 inputs and gives 5 tops, the IR has {len(xs)} and {len(layer.tops)}")
    scores, codes, proposals = xs
    if scores.shape[2] > 1:
        scores = scores[:, :, 1:]
    if codes.shape[2] != scores.shape[2]:
        codes = codes[:, :, 1:, :]
    caffe = str(layer.param("anchor_mode", "default_detect")) == "caffe_detection"
    order = (1, 0, 3, 2) if caffe else (0, 1, 2, 3)   # (ty, tx, th, tw) from the encodings
    t = [codes[..., i].transpose(0, 2, 1) for i in order]
    p = proposals
    pairs = [(p[..., 0], p[..., 2]), (p[..., 1], p[..., 3])]
    if caffe:
        pairs = pairs[::-1]    # y from columns 1 and 3
    return scores, t, pairs


def _detection_tops(layer, scores, ymin, xmin, ymax, xmax, threshold):
    b, c, r = ymin.shape
    boxes = np.stack([ymin, xmin, ymax, xmax]).transpose(1, 3, 2, 0).reshape(b, r * c, 4)
    m, k = room(layer, 0), room(layer, 2)
    out = [np.zeros((b, m), scores.dtype), np.zeros((b, m, 4), boxes.dtype), np.zeros((b, k), np.int64),
           np.zeros((b, k), np.int64), np.zeros((b, 1), np.int64)]
    for s in range(b):
        class_ids, box_ids = np.nonzero(scores[s].T > threshold)
        class_ids, box_ids = class_ids[:m], box_ids[:m]
        labels, counts = np.unique(class_ids, return_counts=True)
        if labels.size > k:
            raise layer.error(f"{labels.size} classes do not fit the tops' {k} entries")
        n = box_ids.size
        out[0][s, :n], out[1][s, :n] = scores[s, box_ids, class_ids], boxes[s, box_ids * c + class_ids]
        out[2][s, :labels.size], out[3][s, :labels.size], out[4][s, 0] = counts, labels, labels.size
    return out


def detectionoutput_float(layer, xs, infos):
    scores, (ty, tx, th, tw), ((y0, y1), (x0, x1)) = _detection_inputs(layer, xs)
    v = _floats(layer, "variance", 4)
    if str(layer.param("anchor_mode", "default_detect")) == "caffe_detection":
        v = [v[1], v[0], v[3], v[2]]
    clip = number(layer, "bbox_xform_clip", math.inf)
    ty, tx, th, tw = ty / v[0], tx / v[1], np.minimum(th / v[2], clip), np.minimum(tw / v[3], clip)
    cya, cxa, ha, wa = ((y0 + y1) / 2.)[:, None], ((x0 + x1) / 2.)[:, None], (y1 - y0)[:, None], (x1 - x0)[:, None]
    h, w = np.exp(th) * ha, np.exp(tw) * wa
    cy, cx = ty * ha + cya, tx * wa + cxa
    height, width = int_param(layer, "image_height"), int_param(layer, "image_width")
    corners = [np.clip(cy - h / 2.0, 0, height), np.clip(cx - w / 2.0, 0, width),
               np.clip(cy + h / 2.0, 0, height), np.clip(cx + w / 2.0, 0, width)]
    return _detection_tops(layer, scores, *corners, number(layer, "score_threshold"))


def detectionoutput_int(layer, xs, infos):
    scores, codes, ((y0, y1), (x0, x1)) = _detection_inputs(layer, xs)
    ly, lx, lh, lw = (_look(layer, c, infos[1], name, layer.const_types[name].signed)
                      for c, name in zip(codes, LUTS))
    m, s, d = (_ints(layer, key, n) for key, n in (("box_scale_value", 3), ("box_shift_value", 3),
                                                   ("delta_shift", 2)))
    if s[0] - d[0] < 1 or s[1] - d[1] < 1:
        raise layer.error(f"box_shift_value {s} must exceed delta_shift {d}", "delta_shift")
    cya, cxa, ha, wa = ((y0 + y1) >> 1)[:, None], ((x0 + x1) >> 1)[:, None], (y1 - y0)[:, None], (x1 - x0)[:, None]

    def scaled(lut, i, size):
        v = np.clip(wrap32(lut * m[i]) >> d[i], *INT16)
        return wrap32(wrap32(v * size) + (1 << (s[i] - d[i] - 1))) >> (s[i] - d[i])
    h, w = scaled(lh, 0, ha), scaled(lw, 0, wa)
    cy = scaled(ly, 1, ha) + requantize(layer, cya, m[2], s[2], 0, *INT16)
    cx = scaled(lx, 1, wa) + requantize(layer, cxa, m[2], s[2], 0, *INT16)
    height, width = int_param(layer, "height"), int_param(layer, "width")
    corners = [np.clip(cy - (h >> 1), 0, height), np.clip(cx - (w >> 1), 0, width),
               np.clip(cy + (h >> 1), 0, height), np.clip(cx + (w >> 1), 0, width)]
    return clamp_tops(layer, _detection_tops(layer, scores, *corners, int_param(layer, "score_threshold_value")))


def _ints(layer, key, n):
    value = layer.param(key)
    if not isinstance(value, list) or len(value) != n or any(isinstance(v, bool) or not isinstance(v, int)
                                                             for v in value):
        raise layer.error(f"'{key}' must be a list of {n} integers, got {value!r}", key)
    return value


# ---- BoundingBox --------------------------------------------------------------------------------
def boundingbox_float(layer, xs, infos):
    b, d = xs
    std = _floats(layer, "std_div", 4, [10.0, 10.0, 5.0, 5.0])
    cya, cxa = (b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2
    ha, wa = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
    dy, dx, dh, dw = (d[..., i] / std[i] for i in range(4))
    cy, cx, h, w = dy * ha + cya, dx * wa + cxa, np.exp(dh) * ha, np.exp(dw) * wa
    return [np.clip(np.stack([cy - h / 2., cx - w / 2., cy + h / 2., cx + w / 2.], -1), 0, 1.0)]


def boundingbox_int(layer, xs, infos):
    bi, di = infos
    b = xs[0] + np.int64(bi.quant(layer)[1])
    d = xs[1]
    dy, dx = d[..., 0] + np.int64(di.quant(layer)[1]), d[..., 1] + np.int64(di.quant(layer)[1])
    m, s = _ints(layer, "box_scale_value", 5), _ints(layer, "box_shift_value", 5)
    sat = int_param(layer, "delta_shift")
    if min(s[0], s[1]) - sat < 1 or min(s[2], s[3]) < 16:
        raise layer.error(f"box_shift_value {s} leaves no room for delta_shift {sat} or 16 table bits",
                          "box_shift_value")
    bits = bi.dtype.bits + di.dtype.bits
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    h, w = wrap32(b[..., 2] - b[..., 0]), wrap32(b[..., 3] - b[..., 1])
    cy = np.clip((wrap32(wrap32(dy * (wrap32(h * m[0]) >> sat)) + (1 << (s[0] - sat - 1))) >> (s[0] - sat))
                 + (b[..., 0] + b[..., 2]) // 2, lo, hi)
    cx = np.clip((wrap32(wrap32(dx * (wrap32(w * m[1]) >> sat)) + (1 << (s[1] - sat - 1))) >> (s[1] - sat))
                 + (b[..., 1] + b[..., 3]) // 2, lo, hi)
    top = (1 << bi.dtype.bits) - 1
    halves = []
    for code, size, name, i in ((d[..., 2], h, "th_lut", 2), (d[..., 3], w, "tw_lut", 3)):
        grow = lut_lookup(layer, code - di.dtype.qmin, layer.const(name), di.dtype.bits, *INT16)
        halves.append(np.clip(wrap32(size * (wrap32(grow * m[i]) >> 16)) >> (s[i] - 16), 0, top))
    rounding = 1 << (s[4] - 1) if s[4] > 1 else 0
    corners = [wrap32(wrap32(wrap32(v) * m[4]) + rounding) >> s[4]
               for v in (cy - halves[0], cx - halves[1], cy + halves[0], cx + halves[1])]
    return clamp_tops(layer, [np.clip(np.stack(corners, -1), 0, 32767)])


FLOAT = {"DecodeBox": decodebox_float, "DetectionOutput": detectionoutput_float, "BoundingBox": boundingbox_float}
INT = {"DecodeBox": decodebox_int, "DetectionOutput": detectionoutput_int, "BoundingBox": boundingbox_int}
