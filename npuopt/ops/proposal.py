"""Proposal: the first stage of TensorFlow's Faster R-CNN, as the parser writes it (its
TensorFlow front end): input 0 the objectness [B, N, 2] (softmax; column 1 is the score),
input 1 the box deltas [B, N, 4] (ty, tx, th, tw), constants `ycenter`, `xcenter`, `ha`,
`wa` (the N anchors), params `score_threshold`, `height`, `width` (the image), and
`scale_anchor` (kept; unused, as by the tool chain). Tops: scores [B, M], boxes [B, M, 4]
(ymin, xmin, ymax, xmax, in pixels), the box count [B, K] (column 0; K the parser's
class_num), and 1 per item [B, 1]; M the top's IR size.

Float (the tool chain's): cy = ty / 10 * ha + ycenter, cx = tx / 10 * wa + xcenter,
h = e^(th / 5) * ha, w = e^(tw / 5) * wa; corners cy -+ h / 2, cx -+ w / 2 clamped to
[0, height] / [0, width]; the boxes whose score > score_threshold, in anchor order, the
first M.

Quantized (the tool chain's): the anchors int16 at the coordinates' scale 2^k, four int16
tables `ty_lut`, `tx_lut`, `th_lut`, `tw_lut` (the deltas' functions at 2^box_shift_value);
h = (th_lut[th] * ha) >> box_shift_value, cy = ((ty_lut[ty] * ha) >> box_shift_value) +
ycenter (w, cx likewise); corners cy -+ h / 2 (halves kept) clamped to [0, height] (the
quantized `height`, `width`), rounded half to even; scores compared with
`score_threshold_value`."""
import torch

from ..dtype import Dtype, computing_float
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ..tensor import PyTensor
from . import _boxes as B
from ._detection import count_param, floor_log2, room, set_tops

DELTA_DIVISORS = (10.0, 10.0, 5.0, 5.0)      # ty, tx, th, tw
ANCHORS = ("ycenter", "xcenter", "ha", "wa")
LUTS = ("ty_lut", "tx_lut", "th_lut", "tw_lut")
INT16 = (-32768, 32767)


def checked(node):
    """(scores [B, N, 2], deltas [B, N, 4], M), the anchors one per box."""
    B.count_io(node, 2, 4)
    scores, deltas = node.inputs[0].betensor, node.inputs[1].betensor
    if scores.dim() != 3 or deltas.dim() != 3 or scores.shape[2] != 2 or deltas.shape[2] != 4 or \
            scores.shape[:2] != deltas.shape[:2]:
        raise B.fail(node, f"needs scores [B, N, 2] and deltas [B, N, 4], got {list(scores.shape)} and "
                                f"{list(deltas.shape)}")
    for key in ANCHORS:
        if node.get_constant(key).betensor.numel() != scores.shape[1]:
            raise B.fail(node, f"constant {key} has {node.get_constant(key).betensor.numel()} anchors for "
                                    f"{scores.shape[1]} boxes")
    for key in ("height", "width"):
        B.number(node, key)
    return scores, deltas, count_param(node, "max_box_num", room(node, 0, 1, scores.shape[1]))


def _anchor(node, key: str, dtype) -> torch.Tensor:
    return node.get_constant(key).betensor.reshape(-1).to(dtype)


def float_boxes(node, deltas: torch.Tensor) -> torch.Tensor:
    d = [deltas[..., i] / div for i, div in enumerate(DELTA_DIVISORS)]
    ya, xa, ha, wa = (_anchor(node, k, deltas.dtype) for k in ANCHORS)
    cy, cx = d[0] * ha + ya, d[1] * wa + xa
    h, w = torch.exp(d[2]) * ha, torch.exp(d[3]) * wa
    height, width = B.number(node, "height"), B.number(node, "width")
    ymin, xmin = torch.clamp(cy - h / 2., 0, height), torch.clamp(cx - w / 2., 0, width)
    ymax, xmax = torch.clamp(cy + h / 2., 0, height), torch.clamp(cx + w / 2., 0, width)
    if not node.placeholders:
        node.placeholders += [PyTensor(f"{node.name}/coords"), PyTensor(f"{node.name}/box")]
    node.placeholders[0].betensor = torch.cat([v.reshape(-1) for v in (cy, cx, h, w, ymin, ymax, xmin, xmax, cy, cx, h,
                                                                      w, d[0] * h, d[1] * w)])
    node.placeholders[1].betensor = torch.cat([v.reshape(-1) for v in (*d, torch.exp(d[2]), torch.exp(d[3]))])
    return torch.stack([ymin, xmin, ymax, xmax], dim=-1)


def int_boxes(node, deltas: torch.Tensor) -> torch.Tensor:
    """Corners (float, halves kept) from the tables and the int16 anchors."""
    x_t = node.inputs[1]
    shift = int(node.get_param("box_shift_value"))
    index = deltas.to(torch.int64) - qmath.integer_range(x_t.qbits, x_t.dtype.is_signed)[0]
    t = []
    for i, name in enumerate(LUTS):
        table, dtype = fields.read_lut(node, name)
        t.append(qmath.lut_lookup(index[..., i], table, x_t.qbits, dtype.bits, dtype.is_signed))
    ya, xa, ha, wa = (_anchor(node, k, torch.int64) for k in ANCHORS)
    h, w = (t[2] * ha) >> shift, (t[3] * wa) >> shift
    cy, cx = ((t[0] * ha) >> shift) + ya, ((t[1] * wa) >> shift) + xa
    height, width = int(node.get_param("height")), int(node.get_param("width"))
    half_h, half_w = h.to(torch.float64) / 2, w.to(torch.float64) / 2
    ymin, ymax = torch.clamp(cy - half_h, 0, height), torch.clamp(cy + half_h, 0, height)
    xmin, xmax = torch.clamp(cx - half_w, 0, width), torch.clamp(cx + half_w, 0, width)
    return torch.round(torch.stack([ymin, xmin, ymax, xmax], dim=-1))


@op_register(OpType.Proposal, "1.0")
def proposal_forward(self, *args):
    scores, deltas, max_boxes = checked(self)
    batch = scores.shape[0]
    if self.quantized:
        score, boxes = scores[..., 1].to(torch.int64), int_boxes(self, deltas)
        threshold = int(self.get_param("score_threshold_value"))
    else:
        deltas = computing_float(deltas)
        score, boxes = computing_float(scores)[..., 1], float_boxes(self, deltas)
        threshold = B.number(self, "score_threshold")
    out_scores = torch.zeros(batch, max_boxes, dtype=score.dtype)
    out_boxes = torch.zeros(batch, max_boxes, 4, dtype=boxes.dtype)
    counts = torch.zeros(batch, room(self, 2, 1, 1), dtype=torch.int64)
    for b in range(batch):
        keep = torch.nonzero(score[b] > threshold).reshape(-1)[:max_boxes]
        out_scores[b, :keep.numel()], out_boxes[b, :keep.numel()] = score[b, keep], boxes[b, keep]
        counts[b, 0] = keep.numel()
    values = [out_scores, out_boxes, counts, torch.ones(batch, 1, dtype=torch.int64)]
    return set_tops(self, values, 2)


# ---- quantize ------------------------------------------------------------------------------
def power_of_two_scale(node, t) -> float:
    """2^floor(log2 s) of the symmetric 16-bit (restricted range) scale of a placeholder's range."""
    lo, hi = QT.activation_range(node, t, True)
    scale, _, _, _ = qmath.linear_quant_params(lo, hi, max(16, settings_of(node).activation_bits), True, False, True)
    return 2.0 ** floor_log2(scale)


def delta_table(x_t, k: int, divisor: float, exponential: bool, scale: float) -> torch.Tensor:
    """A delta's function sampled as the tool chain samples it: 2^k points spread evenly over the
    input's integer range, at `scale`, int16."""
    real = qmath.dequantize(torch.linspace(x_t.dtype.qmin, x_t.dtype.qmax, steps=1 << k), x_t.scale, x_t.zerop)
    real = real / divisor
    return qmath.quantize(torch.exp(real) if exponential else real, scale, 0, *INT16)


@quant_register(OpType.Proposal, "1.0")
def proposal_quantize(self, *args):
    """The tool chain's: the coordinates (anchors, boxes, image size) at 2^floor(log2 s) of
    the decoded coordinates' 16-bit range, the tables at 2^floor(log2 s) of the deltas' and
    their functions' range; the scores keep the input's grid."""
    QT.check_quantized_inputs(self)
    s_t, x_t = self.inputs
    if x_t.qinvariant or x_t.is_per_channel or s_t.is_per_channel or x_t.qbits > 16 or not self.placeholders:
        raise QT.Unsupported(f"layer '{self.name}' (Proposal): needs per-tensor inputs (deltas of at most 16 bits) "
                             f"and calibrated coordinates")
    coords = power_of_two_scale(self, self.placeholders[0])
    box = power_of_two_scale(self, self.placeholders[1])
    self.params["height"] = int(B.number(self, "height") * coords)
    self.params["width"] = int(B.number(self, "width") * coords)
    for key in ANCHORS:
        fields.set_constant(self, key, qmath.quantize(self.get_constant(key).betensor.reshape(-1), coords, 0, *INT16),
                            Dtype.INT16)
    k = min(x_t.qbits, settings_of(self).lut_items_in_bits)
    for name, divisor, exponential in zip(LUTS, DELTA_DIVISORS, (False, False, True, True)):
        fields.write_lut(self, delta_table(x_t, k, divisor, exponential, box), Dtype.INT16, name)
    self.params["box_shift_value"] = floor_log2(box)
    self.params["box_shift_type"] = fields.SHIFT_DTYPE.value
    score_range = qmath.integer_range(s_t.qbits, False)
    self.params["score_threshold_value"] = int(qmath.quantize(torch.tensor(B.number(self, "score_threshold")),
                                                              s_t.scale, s_t.zerop, *score_range))
    self.params["score_threshold_type"] = Dtype.integer(s_t.qbits, False).value
    QT.copy_quantization(s_t, self.outputs[0])
    QT.set_quantization(self.outputs[1], coords, 0, *INT16, 16, True)
    for t in self.outputs[2:]:
        QT.set_quantization(t, 1.0, 0, 0, 65535, 16, False)
        t.qinvariant = True
