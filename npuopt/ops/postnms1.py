"""PostNMS1: the first `proposal_cnt` boxes an NMS kept, gathered from its input boxes, and
the same boxes divided by max(`image_height`, `image_width`) (what the parser writes after
a Mask R-CNN's proposal NMS).

Inputs: boxes [B, P, 4] (NMS's input), kept indices [B, N] and kept boxes per class slot
[B, K] (NMS's tops 3 and 1). As the tool chain gathers them: the kept index j of class
slot c picks box offset(c) + keep[j], offset(c) the kept counts of the slots before c; a
class stops at an index past P. Tops: boxes [B, proposal_cnt, 4] and normalized boxes.
Quantized: boxes keep their input's grid; normalized boxes (q + zp) * `nor_box_scale_h`
(y) or `nor_box_scale_w` (x) >> `nor_box_shift_h`/`_w` (10) into uint16 at (2^b - 1) steps
per unit (b: the input's bits; npuopt gives both axes the scale of the larger side, so
that one top scale holds for both; the tool chain scales x by the width alone)."""
import math

import torch

from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._movement import int_param

NOR_SHIFT = 10


def checked_inputs(node):
    B.count_io(node, 3, 2)
    boxes, keep, counts = (t.betensor for t in node.inputs)
    B.shape_is(node, boxes, "input 0 (boxes)", 3, 4)
    if keep.dim() != 2 or counts.dim() != 2 or keep.shape[0] != boxes.shape[0] or counts.shape[0] != boxes.shape[0]:
        raise B.fail(node, f"inputs of shapes {[list(t.betensor.shape) for t in node.inputs]} do not fit boxes "
                           f"[B, P, 4], kept indices [B, N], kept boxes per class [B, K]")
    count = int_param(node, "proposal_cnt", minimum=1)
    for top in (0, 1):
        if B.top_size(node, top, 1) != count:
            raise B.fail(node, f"proposal_cnt {count} differs from top {top}'s {B.top_size(node, top, 1)} boxes")
    return boxes, keep.to(torch.int64), counts.to(torch.int64), count


def gathered(boxes, keep, counts, count: int) -> torch.Tensor:
    """One sample's first `count` kept boxes (the tool chain's walk over the class slots)."""
    out = torch.zeros((count, 4), dtype=boxes.dtype, device=boxes.device)
    filled = offset = 0
    for n in counts.tolist():
        take = min(max(n, 0), count - filled, keep.numel() - filled)
        if take > 0:
            index = offset + keep[filled:filled + take]
            past = (index >= boxes.shape[0]).nonzero()
            take = int(past[0]) if past.numel() else take
            out[filled:filled + take] = boxes[index[:take]]
            filled += take
        offset += n
    return out


@op_register(OpType.PostNMS1, "1.0")
def postnms1_forward(self, *args):
    boxes, keep, counts, count = checked_inputs(self)
    height, width = (int_param(self, key, minimum=1) for key in ("image_height", "image_width"))
    out = torch.stack([gathered(boxes[b], keep[b], counts[b], count) for b in range(boxes.shape[0])])
    top0, top1 = self.outputs
    if not self.quantized:
        top0.betensor, top1.betensor = out, out / max(height, width)
        return [top0.betensor, top1.betensor]
    shifted = out.to(torch.int64) + int(self.inputs[0].zerop)
    normalized = torch.empty_like(shifted)
    for axis, key in ((0, "h"), (1, "w")):
        normalized[..., axis::2] = qmath.requantize(shifted[..., axis::2], int_param(self, f"nor_box_scale_{key}"),
                                                    int_param(self, f"nor_box_shift_{key}"), int(top1.zerop),
                                                    top1.qmin, top1.qmax).to(torch.int64)
    B.store_ints(out.clamp(top0.qmin, top0.qmax), top0)
    B.store_ints(normalized, top1)
    return [top0.betensor, top1.betensor]


@quant_register(OpType.PostNMS1, "1.0")
def postnms1_quantize(self, *args):
    QT.check_quantized_inputs(self)
    boxes = self.inputs[0]
    top0, top1 = self.outputs
    QT.copy_quantization(boxes, top0)
    side = max(int_param(self, key, minimum=1) for key in ("image_height", "image_width"))
    steps = (1 << boxes.qbits) - 1
    per_code = steps / (float(boxes.scale) * side)   # normalized steps per box code
    QT.set_quantization(top1, steps, 0, 0, 65535, 16, False)
    multiplier = math.floor(per_code * (1 << NOR_SHIFT))
    self.params.update(nor_box_scale_h=multiplier, nor_box_scale_w=multiplier, nor_box_shift_h=NOR_SHIFT,
                       nor_box_shift_w=NOR_SHIFT)
