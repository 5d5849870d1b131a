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
            clamped, rounded half to even; scores against score_threshold_value."""
import numpy as np

from ..intmath import lut_lookup


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


FLOAT = {"MaxRoiPool": roipool_float, "Proposal": proposal_float}
INT = {"MaxRoiPool": roipool_int, "Proposal": proposal_int}
