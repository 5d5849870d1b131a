"""YOLO post-processing: Region, RegionFuse (docs/integer-semantics.md, "Region",
"RegionFuse"; docs/ir-ops.md, "Detection post-processing").

Region    input [B, gh, gw, A, 5 + C]. Float: p = sigmoid(t4) * softmax(t5..) per cell and
          anchor; every (cell, anchor, class) with p > obj_thresh is a box; when more pass
          than max_box_num, the best min(max_box_num, 5000) by score (ties as the tool chain's
          unstable sort leaves them, scoresort.py);
          listed class by class (ascending), in a class row-major or by score when capped.
          Integer: y = score_softmax_lut[q - max(q) + 2^b - 1], g = conf_sigmoid_lut[q4 - qmin],
          P = (y * g) >> conf_sigmoid_shift, 0 where P <= (sum(y) * obj_thresh) >> 8, score =
          floor(P * (2^b - 1) / max(sum(y), 1)) > obj_thresh; boxes from the xy/wh tables, the
          quantized anchors and the grid scales in int32 (wrapping) arithmetic.
RegionFuse  two Regions' tops merged class by class (labels ascending; a label of both:
          input 0's boxes, then input 1's); integer scores and boxes first rescaled:
          clamp((v * M) >> s) into the input's type."""
import numpy as np

from ..intmath import lut_lookup
from .detection import wrap32
from .scoresort import tool_chain_order

COORDS = 5
PICK_LIMIT = 5000


def _count(layer, xs, n_in, n_out):
    if len(xs) != n_in or len(layer.tops) != n_out:
        raise layer.error(f"takes {n_in} inputs and {n_out} tops, the IR gives {len(xs)} and {len(layer.tops)}",
                          "layer_bottom")


def _int(layer, key) -> int:
    value = layer.param(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise layer.error(f"'{key}' must be an integer, got {value!r}", key)
    return int(value)


def _table(layer, name, index, bits):
    kind = layer.const_types.get(name)
    if kind is None:
        raise layer.error(f"missing constant '{name}'")
    return lut_lookup(layer, index, layer.const(name), bits, kind.qmin, kind.qmax)


# ---- Region ------------------------------------------------------------------------------
def _region_shape(layer, x):
    if x.ndim != 5 or x.shape[-1] <= COORDS:
        raise layer.error(f"needs a 5-D input [B, gh, gw, A, 5 + C], got {list(x.shape)}", "layer_bottom_shape")
    gh, gw, a, c = x.shape[1], x.shape[2], x.shape[3], x.shape[4] - COORDS
    for key, size in (("grid_height", gh), ("grid_width", gw), ("box_per_grid", a), ("class_num", c)):
        if key in layer.params and layer.param(key) != size:
            raise layer.error(f"{key} {layer.param(key)} does not fit the input {list(x.shape)}", key)
    max_boxes = layer.param("max_box_num", layer.top_shapes[1][1])
    if max_boxes != layer.top_shapes[0][1] or max_boxes != layer.top_shapes[1][1]:
        raise layer.error(f"max_box_num {max_boxes} does not fit the tops {layer.top_shapes[:2]}", "max_box_num")
    return gh, gw, a, c, max_boxes


def _pick(scores, threshold, max_boxes):
    """Indices (row, col, anchor, class) of the scores above threshold in the tops' order."""
    idx = np.argwhere(scores > threshold)
    picked = scores[tuple(idx.T)]
    if len(idx) > max_boxes:
        keep = tool_chain_order(picked, True, picked.dtype.kind == "i")[:min(max_boxes, PICK_LIMIT)]
        idx, picked = idx[keep], picked[keep]
    order = np.argsort(idx[:, 3], kind="stable")
    labels, counts = np.unique(idx[:, 3], return_counts=True)
    return idx[order], picked[order], labels, counts


def _region_run(layer, x, scores, threshold, boxes_of, dtype):
    b = x.shape[0]
    _, _, _, c, max_boxes = _region_shape(layer, x)
    out = [np.zeros((b, max_boxes), dtype), np.zeros((b, max_boxes, 4), dtype), np.zeros((b, c), np.int64),
           np.zeros((b, c), np.int64), np.zeros((b, 1), np.int64)]
    for i in range(b):
        idx, picked, labels, counts = _pick(scores[i], threshold, max_boxes)
        n = len(idx)
        out[0][i, :n], out[1][i, :n] = picked, boxes_of(x[i], idx)
        out[2][i, :len(labels)], out[3][i, :len(labels)], out[4][i, 0] = counts, labels, len(labels)
    return out


def region_float(layer, xs, infos):
    _count(layer, xs, 1, 5)
    x = xs[0].astype(np.float64)
    gh, gw, a, _, _ = _region_shape(layer, x)
    anchors = np.asarray(layer.param("anchors"), np.float64).reshape(-1)
    if anchors.size != 2 * a:
        raise layer.error(f"anchors has {anchors.size} values for {a} anchors per cell", "anchors")
    shift = 0.5 if layer.param("grid_compensate", True) and gh % 2 == 0 and gw % 2 == 0 else 0.0
    conf = 1 / (1 + np.exp(-x[..., 4:5]))
    e = np.exp(x[..., COORDS:] - x[..., COORDS:].max(axis=-1, keepdims=True))
    scores = conf * e / e.sum(axis=-1, keepdims=True)

    def boxes(xi, idx):
        r, col, k = idx[:, 0], idx[:, 1], idx[:, 2]
        t = xi[r, col, k, :4]
        sx, sy = 1 / (1 + np.exp(-t[:, 0])), 1 / (1 + np.exp(-t[:, 1]))
        cx, cy = (col - shift + sx) / gw, (r - shift + sy) / gh
        w, h = anchors[2 * k] * np.exp(t[:, 2]) / gw, anchors[2 * k + 1] * np.exp(t[:, 3]) / gh
        return np.clip(np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], -1), 0.0, 1.0)
    return _region_run(layer, x, scores, float(layer.param("obj_thresh")), boxes, np.float64)


def region_int(layer, xs, infos):
    _count(layer, xs, 1, 5)
    x, dtype = xs[0], infos[0].dtype
    if not dtype.signed:
        raise layer.error("the integer Region reads its input as signed; the IR's input is unsigned", "layer_bottom_type")
    bits = dtype.bits
    raw = x[..., COORDS:]
    y = _table(layer, "score_softmax_lut", raw - raw.max(axis=-1, keepdims=True) + (1 << bits) - 1, bits)
    g = _table(layer, "conf_sigmoid_lut", x[..., 4:5] + (1 << (bits - 1)), bits)
    p = (y * g) >> _int(layer, "conf_sigmoid_shift")
    total = y.sum(axis=-1, keepdims=True)
    threshold = _int(layer, "obj_thresh")
    p[p <= (total * threshold) >> 8] = 0
    scores = p * ((1 << bits) - 1) // np.maximum(total, 1)
    k = {key: _int(layer, key) for key in ("col_shift", "row_shift", "grid_w_scale", "grid_w_shift", "grid_h_scale",
                                           "grid_h_shift", "wh_exp_scale", "wh_exp_shift", "anchors_exp_w_shift",
                                           "anchors_exp_h_shift")}
    anchors = layer.const("qanchors_lut").astype(np.int64).reshape(-1)

    def boxes(xi, idx):
        r, col, a = idx[:, 0], idx[:, 1], idx[:, 2]
        t = xi[r, col, a, :4] + (1 << (bits - 1))
        sx, sy = _table(layer, "xy_sigmoid_lut", t[:, 0], bits), _table(layer, "xy_sigmoid_lut", t[:, 1], bits)
        ew, eh = _table(layer, "wh_exp_lut", t[:, 2], bits), _table(layer, "wh_exp_lut", t[:, 3], bits)
        cx = wrap32(wrap32((col << k["col_shift"]) + sx) * k["grid_w_scale"]) >> k["grid_w_shift"]
        cy = wrap32(wrap32((r << k["row_shift"]) + sy) * k["grid_h_scale"]) >> k["grid_h_shift"]
        w = wrap32(anchors[2 * a] * k["grid_w_scale"]) >> k["grid_w_shift"]
        h = wrap32(anchors[2 * a + 1] * k["grid_h_scale"]) >> k["grid_h_shift"]
        w = wrap32(w * (wrap32(ew * k["wh_exp_scale"]) >> k["wh_exp_shift"])) >> k["anchors_exp_w_shift"]
        h = wrap32(h * (wrap32(eh * k["wh_exp_scale"]) >> k["wh_exp_shift"])) >> k["anchors_exp_h_shift"]
        ys = np.clip(np.stack([cy - (h >> 1), cy + (h >> 1)], -1), 0, 1 << k["row_shift"])
        xs_ = np.clip(np.stack([cx - (w >> 1), cx + (w >> 1)], -1), 0, 1 << k["col_shift"])
        return np.stack([ys[:, 0], xs_[:, 0], ys[:, 1], xs_[:, 1]], -1)
    return _region_run(layer, x, scores, threshold, boxes, np.int64)


# ---- RegionFuse --------------------------------------------------------------------------
def _fuse_sizes(layer, xs):
    _count(layer, xs, 10, 5)
    shapes = [x.shape for x in xs]
    if any(len(s) != 2 for s in shapes[0:2] + shapes[4:]) or any(len(s) != 3 or s[2] != 4 for s in shapes[2:4]) \
            or len({s[0] for s in shapes}) != 1 or shapes[4] != shapes[6] or shapes[5] != shapes[7]:
        raise layer.error(f"inputs {[list(s) for s in shapes]} are not two Regions' tops", "layer_bottom_shape")
    classes = layer.param("class_num")
    if classes < max(shapes[4][1], shapes[5][1]) or layer.top_shapes[2][1] != classes:
        raise layer.error(f"class_num {classes} does not fit the inputs or the tops", "class_num")
    return layer.top_shapes[0][1], classes


def _fuse_one(scores, boxes, counts, labels, totals, capacity, classes):
    """One batch item: boxes keyed by (label, input), in a stable order, cut at capacity."""
    keys, rows, lists = [], [], []
    for i in range(2):
        n = int(np.clip(totals[i].reshape(-1)[0], 0, labels[i].size))
        lab = labels[i][:n].astype(np.int64)
        per_box = np.repeat(lab, np.maximum(counts[i][:n].astype(np.int64), 0))[:scores[i].size]
        keys.append(per_box * 2 + i)
        rows.append(np.arange(per_box.size))
        lists.append(lab)
    key = np.concatenate(keys)
    order = np.argsort(key, kind="stable")[:capacity]
    row, source = np.concatenate(rows)[order], key[order] % 2
    out_s = np.where(source == 0, scores[0][np.minimum(row, scores[0].size - 1)],
                     scores[1][np.minimum(row, scores[1].size - 1)])
    out_b = np.where((source == 0)[:, None], boxes[0][np.minimum(row, len(boxes[0]) - 1)],
                     boxes[1][np.minimum(row, len(boxes[1]) - 1)])
    present = np.unique(np.concatenate(lists))[:classes]
    per_class = np.array([(key[order] // 2 == c).sum() for c in present], np.int64)
    return out_s, out_b, per_class, present


def _fuse_run(layer, xs, dtype):
    capacity, classes = _fuse_sizes(layer, xs)
    batch = xs[0].shape[0]
    out = [np.zeros((batch, capacity), dtype), np.zeros((batch, capacity, 4), dtype),
           np.zeros((batch, classes), np.int64), np.zeros((batch, classes), np.int64), np.zeros((batch, 1), np.int64)]
    for b in range(batch):
        s, bx, per_class, present = _fuse_one(*[[xs[i][b], xs[i + 1][b]] for i in range(0, 10, 2)], capacity, classes)
        out[0][b, :s.size], out[1][b, :s.size] = s, bx
        out[2][b, :present.size], out[3][b, :present.size], out[4][b, 0] = per_class, present, present.size
    return out


def regionfuse_float(layer, xs, infos):
    return _fuse_run(layer, xs, np.float64)


def _pair(layer, key):
    value = layer.param(key)
    if not isinstance(value, list) or len(value) != 2 or any(isinstance(v, bool) or not isinstance(v, int)
                                                               for v in value):
        raise layer.error(f"'{key}' must be a list of two integers, got {value!r}", key)
    return value


def regionfuse_int(layer, xs, infos):
    xs = list(xs)
    for first, prefix in ((0, "score_"), (2, "box_")):
        ms, ss = _pair(layer, prefix + "scale_value"), _pair(layer, prefix + "shift_value")
        for i in range(2):
            kind = infos[first + i].dtype
            xs[first + i] = np.clip(wrap32(xs[first + i] * ms[i]) >> ss[i], kind.qmin, kind.qmax)
    return _fuse_run(layer, xs, np.int64)


FLOAT = {"Region": region_float, "RegionFuse": regionfuse_float}
INT = {"Region": region_int, "RegionFuse": regionfuse_int}
