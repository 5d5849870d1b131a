"""Region: the YOLO v2/v3 head's decoding (the parser's detection_postprocess =
yolo2 | yolo3_tiny | yolo3_full writes it after the last convolution, reshaped to
[batch, grid_height, grid_width, box_per_grid, 5 + class_num]).

Float (the tool chain's): per cell and anchor a, confidence c = sigmoid(t_c), class
scores p = c * softmax(t_classes); every (cell, anchor, class) with p > obj_thresh is a
box. When more than max_box_num pass, the best min(max_box_num, 5000) by score are kept
(the tool chain keeps 5000 whatever max_box_num). The boxes are listed class by class
(classes ascending; in a class, row-major over the grid and anchors, or by score when
capped): top 0 the scores [B, max_box_num], top 1 [ymin, xmin, ymax, xmax] [B,
max_box_num, 4] with x = (col + sigmoid(t_x)) / grid_width, y likewise, w = anchors[2a] *
e^(t_w) / grid_width, h = anchors[2a + 1] * e^(t_h) / grid_height, clamped to [0, 1]
(grid_compensate and an even grid: col - 0.5, row - 0.5); top 2 the boxes per class,
top 3 the classes, top 4 how many classes (zero-filled past the count).

Quantized: the tool chain's integer form (docs/integer-semantics.md, "Region")."""
import torch

from ..dtype import Dtype, computing_float
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._detection import check_room, count_param, floor_log2, room, set_tops

COORDS_AND_CONF = 5
PICK_LIMIT = 5000           # the tool chain's cap on the boxes kept by score
GRID_SHIFT = 15
CONF_SHIFT = 15             # the confidence table's fraction bits
THRESH_SHIFT = 8            # the first threshold test reads obj_thresh at 2^8 steps
COORD_SHIFT_LIMIT = 32767
SOFTMAX_TABLE_TOP = 1 << 20  # the largest exp table entry: 2^12 classes sum within 32 bits
EXP_INPUT_SPAN = 6.39        # the w/h table's scale puts e^6.39 at 65535
LUTS = ("score_softmax_lut", "conf_sigmoid_lut", "xy_sigmoid_lut", "wh_exp_lut")


def geometry(node, shape):
    """(grid_h, grid_w, anchors per cell, classes, max_box_num) from the input shape,
    checked against the params that state them and the tops' IR shapes."""
    B.count_io(node, 1, 5)
    if len(shape) != 5 or shape[-1] <= COORDS_AND_CONF:
        raise B.fail(node, f"needs a 5-D input [batch, grid_height, grid_width, box_per_grid, 5 + classes], "
                                f"got {list(shape)}")
    gh, gw, anchors, classes = int(shape[1]), int(shape[2]), int(shape[3]), int(shape[4]) - COORDS_AND_CONF
    for key, size in (("grid_height", gh), ("grid_width", gw), ("box_per_grid", anchors), ("class_num", classes)):
        if key in node.params and count_param(node, key) != size:
            raise B.fail(node, f"{key} {node.params[key]} does not fit the input {list(shape)}")
    max_boxes = count_param(node, "max_box_num", room(node, 1, 1, PICK_LIMIT))
    check_room(node, 0, 1, max_boxes, "max_box_num")
    check_room(node, 1, 1, max_boxes, "max_box_num")
    for i in (2, 3):
        check_room(node, i, 1, classes, "the class count")
    return gh, gw, anchors, classes, max_boxes


def compensated(node, gh: int, gw: int) -> bool:
    """Whether box centres move half a cell back (grid_compensate on an even grid)."""
    return B.flag(node, "grid_compensate", True) and gh % 2 == 0 and gw % 2 == 0


def selected(scores: torch.Tensor, threshold, max_boxes: int):
    """The (row, col, anchor, class) of the scores above `threshold` [gh, gw, A, C], in the
    order the tops list them, and their scores."""
    found = torch.nonzero(scores > threshold)
    picked = scores[tuple(found.t())]
    if found.shape[0] > max_boxes:
        keep = B.tool_chain_argsort(picked, descending=True)[:min(max_boxes, PICK_LIMIT)]
        found, picked = found[keep], picked[keep]
    order, _, labels, counts = B.group_by_class(torch.arange(found.shape[0]), found[:, 3])
    return found[order], picked[order], labels, counts


def float_boxes(node, x: torch.Tensor, found: torch.Tensor, gh: int, gw: int) -> torch.Tensor:
    anchors = torch.tensor(B.numbers(node, "anchors", 2 * x.shape[2]), dtype=x.dtype)
    row, col, a = found[:, 0], found[:, 1], found[:, 2]
    t = x[row, col, a, :4]
    if compensated(node, gh, gw):
        row, col = row - 0.5, col - 0.5
    cx = (col + torch.sigmoid(t[:, 0])) / gw
    cy = (row + torch.sigmoid(t[:, 1])) / gh
    w = anchors[2 * a] * torch.exp(t[:, 2]) / gw
    h = anchors[2 * a + 1] * torch.exp(t[:, 3]) / gh
    return torch.stack([cy - h / 2., cx - w / 2., cy + h / 2., cx + w / 2.], dim=-1).clamp(0., 1.)


def float_scores(x: torch.Tensor) -> torch.Tensor:
    confidence = torch.sigmoid(x[..., 4:5])
    return confidence * torch.softmax(x[..., COORDS_AND_CONF:], dim=-1)


# ---- the integer form ----------------------------------------------------------------------
def _lookup(node, name: str, index: torch.Tensor, index_bits: int) -> torch.Tensor:
    table, dtype = fields.read_lut(node, name)
    return qmath.lut_lookup(index, table, index_bits, dtype.bits, dtype.is_signed)


def int_scores(node, q: torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """Scores in [0, 2^bits - 1]: y = exp table at q - max(q) over the classes, confidence
    sigmoid table, P = (y * sigmoid) >> conf_sigmoid_shift, 0 where P <= (sum(y) * obj_thresh)
    >> 8, then trunc(P * (2^bits - 1) / sum(y))."""
    raw = q[..., COORDS_AND_CONF:]
    exps = _lookup(node, "score_softmax_lut", raw - raw.amax(dim=-1, keepdim=True) + (1 << bits) - 1, bits)
    sigmoid = _lookup(node, "conf_sigmoid_lut", q[..., 4:5] - qmath.integer_range(bits, signed)[0], bits)
    products = (exps * sigmoid) >> int(node.get_param("conf_sigmoid_shift"))
    total = exps.sum(dim=-1, keepdim=True)
    products = torch.where(products <= (total * int(node.get_param("obj_thresh"))) >> THRESH_SHIFT, 0, products)
    return torch.div(products * ((1 << bits) - 1), total.clamp(min=1), rounding_mode="trunc")


def int_boxes(node, q: torch.Tensor, found: torch.Tensor, bits: int) -> torch.Tensor:
    """Boxes at 2^col_shift per image: centres (cell << shift) + sigmoid table, times
    2^15 / grid in int32; sizes anchor * 2^15 / grid times the exp table rescaled, >> the
    anchors' shift (int32 products wrap, as the tool chain's)."""
    p = {k: int(node.get_param(k)) for k in ("col_shift", "row_shift", "grid_w_scale", "grid_w_shift", "grid_h_scale",
                                              "grid_h_shift", "wh_exp_scale", "wh_exp_shift", "anchors_exp_w_shift",
                                              "anchors_exp_h_shift")}
    anchors = node.get_constant("qanchors_lut").betensor.to(torch.int64).reshape(-1)
    row, col, a = found[:, 0], found[:, 1], found[:, 2]
    t = q[row, col, a, :4] + (1 << (bits - 1))
    xy = _lookup(node, "xy_sigmoid_lut", t[:, :2], bits)
    wh = _lookup(node, "wh_exp_lut", t[:, 2:], bits)
    wrap = B.wrap_int32
    cx = wrap(wrap((col << p["col_shift"]) + xy[:, 0]) * p["grid_w_scale"]) >> p["grid_w_shift"]
    cy = wrap(wrap((row << p["row_shift"]) + xy[:, 1]) * p["grid_h_scale"]) >> p["grid_h_shift"]
    sizes = wrap(wh * p["wh_exp_scale"]) >> p["wh_exp_shift"]
    w = wrap(anchors[2 * a] * p["grid_w_scale"]) >> p["grid_w_shift"]
    h = wrap(anchors[2 * a + 1] * p["grid_h_scale"]) >> p["grid_h_shift"]
    w = wrap(w * sizes[:, 0]) >> p["anchors_exp_w_shift"]
    h = wrap(h * sizes[:, 1]) >> p["anchors_exp_h_shift"]
    ys = torch.stack([cy - (h >> 1), cy + (h >> 1)], -1).clamp(0, 1 << p["row_shift"])
    xs = torch.stack([cx - (w >> 1), cx + (w >> 1)], -1).clamp(0, 1 << p["col_shift"])
    return torch.stack([ys[:, 0], xs[:, 0], ys[:, 1], xs[:, 1]], dim=-1)


@op_register(OpType.Region, "1.0")
def region_forward(self, *args):
    x_t = self.inputs[0]
    x = x_t.betensor
    gh, gw, _, classes, max_boxes = geometry(self, x.shape)
    batch = x.shape[0]
    if self.quantized:
        if not x_t.dtype.is_signed:
            raise B.fail(self, "the quantized form reads its input as signed; the IR's input is unsigned")
        q = x.to(torch.int64)
        bits = x_t.qbits
        scores, value_type = int_scores(self, q, bits, True), torch.int64
        threshold = int(self.get_param("obj_thresh"))
    else:
        x = computing_float(x)
        scores, value_type = float_scores(x), x.dtype
        threshold = B.number(self, "obj_thresh")
    out_scores = torch.zeros(batch, max_boxes, dtype=value_type)
    out_boxes = torch.zeros(batch, max_boxes, 4, dtype=value_type)
    counts = torch.zeros(batch, classes, dtype=torch.int64)
    labels = torch.zeros(batch, classes, dtype=torch.int64)
    totals = torch.zeros(batch, 1, dtype=torch.int64)
    for b in range(batch):
        found, picked, present, per_class = selected(scores[b], threshold, max_boxes)
        n = found.shape[0]
        out_scores[b, :n] = picked
        out_boxes[b, :n] = int_boxes(self, q[b], found, bits) if self.quantized else float_boxes(self, x[b], found,
                                                                                                  gh, gw)
        counts[b, :present.numel()], labels[b, :present.numel()] = per_class, present
        totals[b, 0] = present.numel()
    values = [out_scores, out_boxes, counts, labels, totals]
    return set_tops(self, values, 2)


# ---- quantize ----------------------------------------------------------------------------
def _float32(v) -> torch.Tensor:
    return torch.tensor(float(v), dtype=torch.float32)


def quantized_threshold(threshold: float, bits: int) -> int:
    """obj_thresh on the scores' 2^bits - 1 steps (the tool chain's); wider than 8 bits the
    first test reads it at 2^8 steps, where threshold * 2^8 keeps its meaning."""
    return int(threshold * ((1 << bits) - 1)) if bits <= THRESH_SHIFT else int(threshold * (1 << THRESH_SHIFT))


def coordinate_shift(grid_width: int) -> int:
    """The boxes' fraction bits: floor(log2(65535 / grid_width)) in float32, at most 15."""
    shift = floor_log2(65535 / grid_width)
    while 2 ** shift > COORD_SHIFT_LIMIT:
        shift -= 1
    return shift


def tables(x_t, k: int, centre_offset: float, coord_scale: float):
    """The four lookup tables, sampled as the tool chain samples them: 2^k points spread
    evenly over the input's integer range."""
    lo, hi = x_t.dtype.qmin, x_t.dtype.qmax
    bits = x_t.qbits
    real = qmath.dequantize(torch.linspace(lo, hi, steps=1 << k), x_t.scale, x_t.zerop)
    sigmoid = torch.sigmoid(real)
    top = _float32(SOFTMAX_TABLE_TOP)
    peak = int(qmath.quantize(torch.log(top), x_t.scale, x_t.zerop, -2.0 ** 63, 2.0 ** 63))
    shifted = qmath.dequantize(torch.linspace(0, (1 << bits) - 1, steps=1 << k) + peak - (1 << bits),
                               x_t.scale, x_t.zerop)
    wh_scale = 65535 / torch.tensor(EXP_INPUT_SPAN).exp()   # float32, as every step here
    return {"score_softmax_lut": (torch.exp(shifted).round().clamp(0.0, float(top)), Dtype.UINT32),
            "conf_sigmoid_lut": (qmath.quantize(sigmoid, 2 ** CONF_SHIFT, 0, 0, 65535), Dtype.UINT16),
            "xy_sigmoid_lut": (qmath.quantize(sigmoid - centre_offset, coord_scale, 0, -32768, 32767), Dtype.INT16),
            "wh_exp_lut": (qmath.quantize(torch.exp(real), wh_scale, 0, 0, 65535), Dtype.UINT16)}, wh_scale


@quant_register(OpType.Region, "1.0")
def region_quantize(self, *args):
    """The tool chain's quantization (docs/integer-semantics.md, "Region"), but for the
    threshold of inputs wider than 8 bits, the anchors' grid and the scores' zero point."""
    QT.check_quantized_inputs(self)
    x_t = self.inputs[0]
    if x_t.qinvariant or x_t.is_per_channel or not x_t.dtype.is_signed or x_t.qbits > 16:
        raise QT.Unsupported(f"layer '{self.name}' (Region): its integer form needs a signed per-tensor input "
                             f"of at most 16 bits")
    gh, gw, _, _, _ = geometry(self, x_t.ir_shape)
    bits = x_t.qbits
    p = self.params
    p["obj_thresh"] = quantized_threshold(B.number(self, "obj_thresh"), bits)
    shift = coordinate_shift(gw)
    p["col_shift"] = p["row_shift"] = shift
    p["grid_w_shift"] = p["grid_h_shift"] = GRID_SHIFT
    p["grid_w_scale"], p["grid_h_scale"] = int(2 ** GRID_SHIFT / gw), int(2 ** GRID_SHIFT / gh)
    anchors = torch.tensor(B.numbers(self, "anchors", 2 * int(x_t.ir_shape[3])), dtype=torch.float32)
    top = anchors.max() if float(anchors.max()) >= qmath.FLOAT32_EPS else _float32(65535)
    anchor_shift = floor_log2(_float32(65535) / top)
    p["anchors_exp_w_shift"] = p["anchors_exp_h_shift"] = anchor_shift
    p["conf_sigmoid_shift"] = CONF_SHIFT
    k = min(bits, settings_of(self).lut_items_in_bits)
    luts, wh_scale = tables(x_t, k, 0.5 if compensated(self, gh, gw) else 0.0, float(2 ** shift))
    m, s = qmath.scale_approximation(_float32(2 ** shift) / wh_scale, 16, force_shift_positive=self.force_shift_positive)
    p["wh_exp_scale"], p["wh_exp_shift"] = m, s
    fields.set_constant(self, "qanchors_lut", qmath.quantize(anchors, 2.0 ** anchor_shift, 0, 0, 65535), Dtype.UINT16)
    for name in LUTS:
        fields.write_lut(self, luts[name][0], luts[name][1], name)
    p.pop("anchors")
    outs = self.outputs
    QT.set_quantization(outs[0], float((1 << bits) - 1), 0, 0, (1 << bits) - 1, bits, False)
    QT.set_quantization(outs[1], float(2 ** shift), 0, -32768, 32767, 16, True)
    for t, signed in zip(outs[2:], (False, True, False)):
        QT.set_quantization(t, 1.0, 0, *qmath.integer_range(16, signed), 16, signed)
        t.qinvariant = True
