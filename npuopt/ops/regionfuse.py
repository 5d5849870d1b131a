"""RegionFuse: two Regions' (or a RegionFuse's and a Region's) tops merged into one list,
as the parser's yolo3_tiny / yolo3_full post-processing chains them. Inputs, in the
parser's order: scores 0, scores 1, boxes 0, boxes 1, per-class counts 0 and 1, labels 0
and 1, class totals 0 and 1; tops as Region's, sized by the IR (the parser writes 10000
boxes) and `class_num`.

Classes ascending (the union of both inputs' labels); a class of both lists input 0's
boxes, then input 1's. Boxes past the top's capacity are dropped (and not counted).

Quantized (the tool chain's): scores s' = clamp((s * M) >> sh) and boxes b' = clamp((b *
M) >> sh) into their input's type first (`score_scale_value`/`score_shift_value`,
`box_scale_value`/`box_shift_value`, one pair per input); the tool chain's own quantization
moves the boxes to 2^15 steps per image (top scale 32767) and the scores stay on 2^b - 1
steps. The tool chain's forward fills only the first batch item (the others stay 0);
npuopt fills every one."""
import torch

from ..dtype import Dtype, computing_float
from ..quant import fields
from ..quant import tensors as QT
from ..quant.fields import BranchRescales
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._detection import count_param, floor_log2, room, set_tops

BOX_NORM_BITS = 12


def capacities(node, inputs) -> tuple:
    """(boxes, classes) the tops hold: the IR's sizes (when building: both inputs' boxes
    and `class_num`), checked against the inputs."""
    B.count_io(node, 10, 5)
    shapes = [tuple(t.shape) for t in inputs]
    batch = shapes[0][0]
    boxes_ok = all(len(s) == 2 and s[0] == batch for s in shapes[:2]) and \
        all(len(s) == 3 and s[0] == batch and s[2] == 4 and s[1] == shapes[i][1] for i, s in enumerate(shapes[2:4]))
    if not boxes_ok or any(len(s) != 2 or s[0] != batch for s in shapes[4:]) or \
            shapes[4] != shapes[6] or shapes[5] != shapes[7] or shapes[8][1] != 1 or shapes[9][1] != 1:
        raise B.fail(node, f"inputs {[list(s) for s in shapes]} are not two Regions' tops (scores, scores, "
                                f"boxes, boxes, counts, counts, labels, labels, totals, totals)")
    classes = count_param(node, "class_num")
    if classes < max(shapes[4][1], shapes[5][1]):
        raise B.fail(node, f"class_num {classes} is smaller than the inputs' {shapes[4][1]} and {shapes[5][1]}")
    for i in (2, 3):
        if room(node, i, 1, classes) != classes:
            raise B.fail(node, f"class_num {classes} does not fit top {i} ('{node.outputs[i].name}')")
    capacity = room(node, 0, 1, shapes[0][1] + shapes[1][1])
    if room(node, 1, 1, capacity) != capacity:
        raise B.fail(node, f"tops 0 and 1 hold {capacity} and {room(node, 1, 1, capacity)} boxes")
    return capacity, classes


def _rescaled(node, values, prefix: str, inputs):
    """Scores or boxes on the tops' grid: (v * M) >> s (the product an int32, wrapping),
    clamped to each input's type."""
    branches = BranchRescales.read(node, 2, prefix)
    shifts = branches.shifts if isinstance(branches.shifts, list) else [branches.shifts] * 2
    return [(B.wrap_int32(v.to(torch.int64) * m) >> s).clamp(t.dtype.qmin, t.dtype.qmax)
            for v, m, s, t in zip(values, branches.multipliers, shifts, inputs)]


def merged(scores, boxes, counts, labels, totals, capacity: int, classes: int):
    """One batch item: (scores, boxes, per-class counts, labels, class total)."""
    keys, rows, class_lists, count_lists = [], [], [], []
    for i in range(2):
        n = int(totals[i].reshape(-1)[0].clamp(0, labels[i].numel()))
        lab, cnt = labels[i][:n].to(torch.int64), counts[i][:n].to(torch.int64).clamp(min=0)
        per_box = torch.repeat_interleave(lab, cnt)[:scores[i].numel()]
        keys.append(per_box * 2 + i)
        rows.append(torch.arange(per_box.numel()))
        class_lists.append(lab)
        count_lists.append(cnt)
    key = torch.cat(keys)
    order = torch.sort(key, stable=True).indices[:capacity]
    source = key[order] % 2
    row = torch.cat(rows)[order]
    from_0 = source == 0
    out_scores = torch.where(from_0, scores[0][row.clamp(max=scores[0].numel() - 1)],
                             scores[1][row.clamp(max=scores[1].numel() - 1)])
    out_boxes = torch.where(from_0[:, None], boxes[0][row.clamp(max=boxes[0].shape[0] - 1)],
                            boxes[1][row.clamp(max=boxes[1].shape[0] - 1)])
    present = torch.unique(torch.cat(class_lists))[:classes]
    kept = torch.div(key[order], 2, rounding_mode="floor")
    per_class = (kept[None, :] == present[:, None]).sum(dim=1)
    return out_scores, out_boxes, per_class, present


@op_register(OpType.RegionFuse, "1.0")
def regionfuse_forward(self, *args):
    x = [t.betensor for t in self.inputs]
    capacity, classes = capacities(self, x)
    batch = x[0].shape[0]
    if self.quantized:
        x[0:2] = _rescaled(self, x[0:2], "score_", self.inputs[0:2])
        x[2:4] = _rescaled(self, x[2:4], "box_", self.inputs[2:4])
        value_type = torch.int64
    else:
        x[0:4] = [computing_float(v) for v in x[0:4]]
        value_type = x[0].dtype
    out = [torch.zeros(batch, capacity, dtype=value_type), torch.zeros(batch, capacity, 4, dtype=value_type),
           torch.zeros(batch, classes, dtype=torch.int64), torch.zeros(batch, classes, dtype=torch.int64),
           torch.zeros(batch, 1, dtype=torch.int64)]
    for b in range(batch):
        s, bx, per_class, present = merged(*[[x[i][b], x[i + 1][b]] for i in range(0, 10, 2)], capacity, classes)
        out[0][b, :s.numel()], out[1][b, :s.numel()] = s, bx
        out[2][b, :present.numel()], out[3][b, :present.numel()], out[4][b, 0] = per_class, present, present.numel()
    return set_tops(self, out, 2)


@quant_register(OpType.RegionFuse, "1.0")
def regionfuse_quantize(self, *args):
    """The tool chain's, but for the scores: those already on 2^b - 1 steps (a Region's or
    a RegionFuse's) stay as they are (M = 1, s = 0; the tool chain's (s * (2^b - 1)) >> b
    takes one step off the top at 8 bits and wraps its int32 product at 16); boxes onto the finer input's scale
    times 4096 >> (12 - (bits - signed - floor(log2 scale))); each top takes the
    quantization of the pair's finer input, the scores' scale 2^b - 1, the boxes' their
    type's largest value."""
    QT.check_quantized_inputs(self)
    inputs = self.inputs
    bits = inputs[0].qbits
    finest = min(float(inputs[2].scale), float(inputs[3].scale))
    box_bits = inputs[2].qbits - int(inputs[2].dtype.is_signed)
    shift = BOX_NORM_BITS - (box_bits - floor_log2(finest))
    if shift < 0:
        raise QT.Unsupported(f"layer '{self.name}' (RegionFuse): boxes on a scale of {finest} need a negative shift")
    top = (1 << bits) - 1
    same = all(float(t.scale) == top for t in inputs[0:2])
    BranchRescales([1 if same else top] * 2, [0 if same else bits] * 2, Dtype.integer(bits, False),
                   [fields.SHIFT_DTYPE] * 2).write(self, "score_")
    BranchRescales([int(finest / float(t.scale) * (1 << BOX_NORM_BITS)) for t in inputs[2:4]], [shift] * 2,
                   Dtype.integer(inputs[2].qbits, False), [fields.SHIFT_DTYPE] * 2).write(self, "box_")
    for i, out in enumerate(self.outputs):
        pair = inputs[2 * i:2 * i + 2]
        finer = pair[1] if float(pair[1].scale) < float(pair[0].scale) else pair[0]
        QT.copy_quantization(finer, out)
        out.zerop = 0
        out.qmin, out.qmax = out.dtype.qmin, out.dtype.qmax
    self.outputs[0].scale = float((1 << bits) - 1)
    self.outputs[1].scale = float(self.outputs[1].qmax)
