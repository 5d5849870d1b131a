"""Two-stage detectors' layers: MaxRoiPool, Proposal, GenerateProposals, and RefineDet's
detection output (docs/integer-semantics.md; docs/ir-ops.md, "Detection post-processing").

MaxRoiPool  features [N, H, W, C], ROIs [R, 5] (batch index, y1, x1, y2, x2). Float: corners
            floor(v * scale + 0.5) (in float64, as every float layer here), size max(end - start + 1, 1), bin i of n
            [floor(i * size / n), ceil((i + 1) * size / n)) (float32) from the start, clipped
            to the map. Integer: corners ((q + zp) * spatial + 2^15) >> 16, batch index q + zp,
            the bins' floor/ceil exact. Each bin's maximum; 0 for an empty bin or a batch
            index outside the features.
Proposal    scores [B, N, 2] (column 1), deltas [B, N, 4] (ty, tx, th, tw), anchors ycenter,
            xcenter, ha, wa. Float: cy = ty / 10 * ha + ycenter, h = e^(th / 5) * ha (x, w
            likewise), corners clamped to the image; the boxes above score_threshold in anchor
            order, the first the top holds. Integer: the int16 tables, h = (th_lut * ha) >>
            box_shift_value, cy = ((ty_lut * ha) >> box_shift_value) + ycenter, corners cy -+ h / 2
            clamped, rounded half to even; scores against score_threshold_value.
GenerateProposals  scores [B, H, W, A], deltas [B, H, W, 4A] (tx, ty, tw, th), `weights` the
            base anchors (tiled every 16 pixels as the tool chain tiles them) or one per box.
            The pre_nms_topn best (ties as the tool chain's unstable sort leaves them), sizes (+1 in float) > min_size, greedy NMS
            (float IoU with +1 areas; integer: areas and intersections >> 15 against
            (union * iou_threshold) >> 11), the first post_nms_topn kept; boxes (x1, y1, x2, y2).
            Integer boxes: h = (wh_lut[th] * ha_q) >> delta_shift, cy = ((xy_lut[ty] * ha_q) >>
            delta_shift) + ycenter_a_q, corners cy -+ trunc(h / 2) clamped to [0, (image - 1) *
            anchor_scale].
RefineDetDetection  (float only) priors refined by the first offsets, then decoded by the
            second (centre-size, variances 0.1, 0.1, 0.2, 0.2); per class c >= 1 the priors with
            objectness >= obj_thresh and score > conf_thresh, the best pre_nms_topk, greedy NMS
            (IoU > 0.45 suppresses); all classes' kept by score (ties: class, then order), the
            best post_nms_topk boxes."""
import numpy as np

from ..intmath import lut_lookup
from .scoresort import tool_chain_order


def _count(layer, xs, n_in, n_out):
    if len(xs) != n_in or len(layer.tops) != n_out:
        raise layer.error(f"takes {n_in} inputs and {n_out} tops, the IR gives {len(xs)} and {len(layer.tops)}",
                          "layer_bottom")


# ---- MaxRoiPool -----------------------------------------------------------------------------
def _roipool_params(layer, xs):
    _count(layer, xs, 2, 1)
    features, rois = xs
    if features.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
        raise layer.error(f"needs features [N, H, W, C] and ROIs [R, 5], got {list(features.shape)} and "
                          f"{list(rois.shape)}", "layer_bottom_shape")
    shape = layer.param("pooled_shape")
    if not isinstance(shape, list) or len(shape) != 2 or any(not isinstance(v, int) or v < 1 for v in shape):
        raise layer.error(f"pooled_shape must be two positive integers, got {shape!r}", "pooled_shape")
    scales = layer.param("spatial", [1.0, 1.0])
    if not isinstance(scales, list) or len(scales) != 2:
        raise layer.error(f"spatial must be [y, x], got {scales!r}", "spatial")
    return shape, scales


def _max_pool(features, batch, rows, cols):
    n, _, _, c = features.shape
    (r0, r1), (c0, c1) = rows, cols
    out = np.zeros((len(batch), r0.shape[1], c0.shape[1], c), features.dtype)
    for r, b in enumerate(batch):
        if not 0 <= b < n:
            continue
        for i in range(r0.shape[1]):
            for j in range(c0.shape[1]):
                if r0[r, i] < r1[r, i] and c0[r, j] < c1[r, j]:
                    out[r, i, j] = features[b, r0[r, i]:r1[r, i], c0[r, j]:c1[r, j]].max(axis=(0, 1))
    return out


def _float_bins(start, end, n, limit):
    size = np.maximum(end - start + 1, 1).astype(np.float32)
    step = (size / np.float32(n))[:, None]
    i = np.arange(n, dtype=np.float32)
    lo = np.floor(i * step) + start[:, None]
    hi = np.ceil((i + 1) * step) + start[:, None]
    return np.clip(lo, 0, limit).astype(np.int64), np.clip(hi, 0, limit).astype(np.int64)


def _int_bins(start, end, n, limit):
    size = np.maximum(end - start + 1, 1)[:, None]
    i = np.arange(n)
    lo = i * size // n + start[:, None]
    hi = -(-(i + 1) * size // n) + start[:, None]
    return np.clip(lo, 0, limit), np.clip(hi, 0, limit)


def roipool_float(layer, xs, infos):
    (ph, pw), (sy, sx) = _roipool_params(layer, xs)
    features, rois = xs
    corners = np.floor(rois[:, 1:] * np.array([sy, sx, sy, sx], rois.dtype) + 0.5).astype(np.int64)
    _, h, w, _ = features.shape
    rows = _float_bins(corners[:, 0], corners[:, 2], ph, h)
    cols = _float_bins(corners[:, 1], corners[:, 3], pw, w)
    return [_max_pool(features, np.trunc(rois[:, 0]).astype(np.int64), rows, cols)]


def roipool_int(layer, xs, infos):
    (ph, pw), scales = _roipool_params(layer, xs)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in scales):
        raise layer.error(f"the integer spatial must be two integers, got {scales!r}", "spatial")
    features = xs[0]
    r = xs[1] + infos[1].quant(layer)[1]
    corners = (r[:, 1:] * np.array(scales * 2, np.int64) + (1 << 15)) >> 16
    _, h, w, _ = features.shape
    rows = _int_bins(corners[:, 0], corners[:, 2], ph, h)
    cols = _int_bins(corners[:, 1], corners[:, 3], pw, w)
    return [_max_pool(features, r[:, 0], rows, cols)]


# ---- Proposal -------------------------------------------------------------------------------
ANCHORS = ("ycenter", "xcenter", "ha", "wa")
DIVISORS = (10.0, 10.0, 5.0, 5.0)


def _proposal_inputs(layer, xs):
    _count(layer, xs, 2, 4)
    scores, deltas = xs
    if scores.ndim != 3 or deltas.ndim != 3 or scores.shape[2] != 2 or deltas.shape[2] != 4 \
            or scores.shape[:2] != deltas.shape[:2]:
        raise layer.error(f"needs scores [B, N, 2] and deltas [B, N, 4], got {list(scores.shape)} and "
                          f"{list(deltas.shape)}", "layer_bottom_shape")
    anchors = [layer.const(k).reshape(-1) for k in ANCHORS]
    if any(a.size != scores.shape[1] for a in anchors):
        raise layer.error(f"the anchors ({[a.size for a in anchors]}) do not fit {scores.shape[1]} boxes", "ha_shape")
    return scores[..., 1], deltas, anchors


def _proposal_tops(layer, score, boxes, threshold, dtype):
    b = score.shape[0]
    m = layer.top_shapes[0][1]
    out = [np.zeros((b, m), dtype), np.zeros((b, m, 4), dtype), np.zeros((b, layer.top_shapes[2][1]), np.int64),
           np.ones((b, 1), np.int64)]
    for i in range(b):
        keep = np.flatnonzero(score[i] > threshold)[:m]
        out[0][i, :keep.size], out[1][i, :keep.size], out[2][i, 0] = score[i, keep], boxes[i, keep], keep.size
    return out


def _corners(cy, cx, h, w, height, width):
    return np.stack([np.clip(cy - h / 2, 0, height), np.clip(cx - w / 2, 0, width),
                     np.clip(cy + h / 2, 0, height), np.clip(cx + w / 2, 0, width)], -1)


def proposal_float(layer, xs, infos):
    score, deltas, (ya, xa, ha, wa) = _proposal_inputs(layer, xs)
    d = [deltas[..., i] / div for i, div in enumerate(DIVISORS)]
    boxes = _corners(d[0] * ha + ya, d[1] * wa + xa, np.exp(d[2]) * ha, np.exp(d[3]) * wa,
                     float(layer.param("height")), float(layer.param("width")))
    return _proposal_tops(layer, score, boxes, float(layer.param("score_threshold")), np.float64)


def proposal_int(layer, xs, infos):
    score, deltas, (ya, xa, ha, wa) = _proposal_inputs(layer, xs)
    shift = layer.param("box_shift_value")
    kind = infos[1].dtype
    t = []
    for i, name in enumerate(("ty_lut", "tx_lut", "th_lut", "tw_lut")):
        table_kind = layer.const_types[name]
        t.append(lut_lookup(layer, deltas[..., i] - kind.qmin, layer.const(name), kind.bits, table_kind.qmin,
                            table_kind.qmax))
    h, w = (t[2] * ha) >> shift, (t[3] * wa) >> shift
    cy, cx = ((t[0] * ha) >> shift) + ya, ((t[1] * wa) >> shift) + xa
    boxes = _corners(cy, cx, h.astype(np.float64), w.astype(np.float64), layer.param("height"), layer.param("width"))
    return _proposal_tops(layer, score, np.round(boxes).astype(np.int64), layer.param("score_threshold_value"),
                          np.int64)


# ---- GenerateProposals ------------------------------------------------------------------------
def _gp_inputs(layer, xs):
    _count(layer, xs, 3, 4)
    scores, deltas = xs[0], xs[1]
    if scores.ndim != 4 or deltas.ndim != 4 or deltas.shape[:3] != scores.shape[:3] \
            or deltas.shape[3] != 4 * scores.shape[3]:
        raise layer.error(f"needs scores [B, H, W, A] and deltas [B, H, W, 4A], got {list(scores.shape)} and "
                          f"{list(deltas.shape)}", "layer_bottom_shape")
    post = layer.param("post_nms_topn")
    if layer.top_shapes[0][1] != post:
        raise layer.error(f"post_nms_topn {post} does not fit the tops {layer.top_shapes[:2]}", "post_nms_topn")
    b = scores.shape[0]
    return scores.reshape(b, -1), deltas.reshape(b, -1, 4), layer.param("pre_nms_topn"), post


def _gp_anchors(layer, shape):
    """(w, h, x centre, y centre) per box: `weights` as given, or its base anchors tiled every
    16 pixels, cell c shifted by 16 * (c mod H) in x and 16 * (c div H) in y."""
    base = layer.const("weights").astype(np.float32).reshape(-1, 4)
    h, w, a = shape[1], shape[2], shape[3]
    if base.shape[0] == h * w * a:
        return base
    if base.shape[0] != a:
        raise layer.error(f"weights holds {base.shape[0]} anchors for {a} per cell", "weights_shape")
    cell = np.arange(h * w)
    dx, dy = (cell % h).astype(np.float32) * 16, (cell // h).astype(np.float32) * 16
    boxes = (base[None] + np.stack([dx, dy, dx, dy], -1)[:, None]).reshape(-1, 4)
    wa, ha = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    return np.stack([wa, ha, boxes[:, 0] + np.float32(0.5) * wa, boxes[:, 1] + np.float32(0.5) * ha], -1)


def _nms(boxes, limit, extent, survives):
    x0, y0, x1, y1 = boxes.T
    alive = np.ones(len(boxes), bool)
    keep = []
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        keep.append(i)
        if len(keep) == limit:
            break
        w = np.maximum(np.minimum(x1[i], x1[i + 1:]) - np.maximum(x0[i], x0[i + 1:]) + extent, 0)
        h = np.maximum(np.minimum(y1[i], y1[i + 1:]) - np.maximum(y0[i], y0[i + 1:]) + extent, 0)
        alive[i + 1:] &= survives(i, w * h)
    return np.array(keep, np.int64)


def _gp_run(layer, scores, boxes, pre, post, min_size, extent, survives_of, dtype):
    b = scores.shape[0]
    out = [np.zeros((b, post), dtype), np.zeros((b, post, 4), dtype), np.zeros((b, post, 1), dtype),
           np.zeros((b, 1), np.int64)]
    for i in range(b):
        order = tool_chain_order(scores[i], True, scores.dtype.kind == "i")[:pre]
        sizes = boxes[i, order, 2:] - boxes[i, order, :2] + extent
        order = order[(sizes > min_size).all(axis=-1)]
        kept = boxes[i, order]
        keep = order[_nms(kept, post, extent, survives_of(kept))]
        out[0][i, :keep.size], out[1][i, :keep.size], out[3][i, 0] = scores[i, keep], boxes[i, keep], keep.size
    return out


def generate_proposals_float(layer, xs, infos):
    scores, deltas, pre, post = _gp_inputs(layer, xs)
    wa, ha, xa, ya = _gp_anchors(layer, xs[0].shape).astype(np.float64).T
    tx, ty, tw, th = np.moveaxis(deltas, -1, 0)
    h, w, cy, cx = np.exp(th) * ha, np.exp(tw) * wa, ty * ha + ya, tx * wa + xa
    bottom, right = float(layer.param("image_height")) - 1, float(layer.param("image_width")) - 1
    boxes = np.stack([np.clip(cx - w / 2, 0, right), np.clip(cy - h / 2, 0, bottom), np.clip(cx + w / 2, 0, right),
                      np.clip(cy + h / 2, 0, bottom)], -1)
    iou = float(layer.param("iou_threshold"))

    def survives_of(kept):
        areas = (kept[:, 2] - kept[:, 0] + 1) * (kept[:, 3] - kept[:, 1] + 1)
        return lambda i, inter: inter / (areas[i] + areas[i + 1:] - inter) <= iou
    return _gp_run(layer, scores, boxes, pre, post, float(layer.param("min_size")), 1, survives_of, np.float64)


def generate_proposals_int(layer, xs, infos):
    scores, deltas, pre, post = _gp_inputs(layer, xs)
    kind = infos[1].dtype
    shift, scale, iou = layer.param("delta_shift"), layer.param("anchor_scale"), layer.param("iou_threshold")
    t = [lut_lookup(layer, deltas[..., i] - kind.qmin, layer.const(name), kind.bits, -32768, 32767)
         for i, name in enumerate(("xy_lut", "xy_lut", "wh_lut", "wh_lut"))]
    ya, xa, ha, wa = (layer.const(k).astype(np.int64).reshape(-1) for k in ("ycenter_a_q", "xcenter_a_q", "ha_q",
                                                                             "wa_q"))
    h, w = (t[3] * ha) >> shift, (t[2] * wa) >> shift
    cy, cx = ((t[1] * ha) >> shift) + ya, ((t[0] * wa) >> shift) + xa
    bottom = int(layer.param("image_height") * scale) - scale
    right = int(layer.param("image_width") * scale) - scale
    half_h, half_w = np.trunc(h / 2).astype(np.int64), np.trunc(w / 2).astype(np.int64)
    boxes = np.stack([np.clip(cx - half_w, 0, right), np.clip(cy - half_h, 0, bottom), np.clip(cx + half_w, 0, right),
                      np.clip(cy + half_h, 0, bottom)], -1)

    def survives_of(kept):
        areas = ((kept[:, 3] - kept[:, 1]) * (kept[:, 2] - kept[:, 0])) >> 15

        def survives(i, inter):
            inter = inter >> 15
            return inter <= (((areas[i] + areas[i + 1:] - inter) * iou) >> 11)
        return survives
    return _gp_run(layer, scores, boxes, pre, post, layer.param("min_size"), 0, survives_of, np.int64)


# ---- RefineDetDetection ---------------------------------------------------------------------
VARIANCES = (0.1, 0.1, 0.2, 0.2)


def _decode(priors, offsets):
    w, h = priors[..., 2] - priors[..., 0], priors[..., 3] - priors[..., 1]
    cx = VARIANCES[0] * offsets[..., 0] * w + (priors[..., 0] + priors[..., 2]) / 2
    cy = VARIANCES[1] * offsets[..., 1] * h + (priors[..., 1] + priors[..., 3]) / 2
    w, h = np.exp(VARIANCES[2] * offsets[..., 2]) * w, np.exp(VARIANCES[3] * offsets[..., 3]) * h
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)


def _refinedet_one(layer, boxes, scores, objectness, pre, post):
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    found = []   # (score, class, prior)
    for c in range(1, scores.shape[1]):
        cand = np.flatnonzero((objectness >= layer.param("obj_thresh")) & (scores[:, c] > layer.param("conf_thresh")))
        cand = cand[np.argsort(-scores[cand, c], kind="stable")[:pre]]
        kept = []
        for p in cand:
            if len(kept) == post:
                break
            lo, hi = np.maximum(boxes[p, :2], boxes[kept, :2]), np.minimum(boxes[p, 2:], boxes[kept, 2:])
            inter = np.clip(hi - lo, 0, None).prod(axis=-1)
            if not (inter > 0.45 * (areas[p] + areas[kept] - inter)).any():
                kept.append(p)
        found += [(scores[p, c], c, p) for p in kept]
    order = sorted(range(len(found)), key=lambda i: (-found[i][0], found[i][1], i))[:post]
    return boxes[[found[i][2] for i in order]].reshape(-1, 4)


def refinedet_float(layer, xs, infos):
    _count(layer, xs, 5, 1)
    arm_conf, odm_conf, arm_loc, odm_loc, priors = xs
    if arm_conf.ndim != 3 or arm_conf.shape[2] != 2 or priors.shape[-2:] != arm_loc.shape[-2:]:
        raise layer.error(f"needs objectness [B, N, 2], class scores, offsets and priors [1, N, 4], got "
                          f"{[list(x.shape) for x in xs]}", "layer_bottom_shape")
    post, pre = layer.param("post_nms_topk"), layer.param("pre_nms_topk")
    boxes = _decode(_decode(np.broadcast_to(priors, arm_loc.shape), arm_loc), odm_loc)
    out = np.zeros((boxes.shape[0], post, 4))
    for b in range(boxes.shape[0]):
        kept = _refinedet_one(layer, boxes[b], odm_conf[b], arm_conf[b, :, 1], pre, post)
        out[b, :len(kept)] = kept
    return [out]


FLOAT = {"MaxRoiPool": roipool_float, "Proposal": proposal_float, "GenerateProposals": generate_proposals_float,
         "RefineDetDetection": refinedet_float}
INT = {"MaxRoiPool": roipool_int, "Proposal": proposal_int, "GenerateProposals": generate_proposals_int}
