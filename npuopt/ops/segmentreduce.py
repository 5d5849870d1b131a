"""SegmentReduce (TensorFlow's segment_sum and its kin): input 0 the data, input 1 the
segment ids (int32, one per row of the data's first axis); `method` SUM (default), MEAN,
MAX, MIN or PROD. Row j of the top reduces the data rows whose id is j, for j up to the
last id (the ids sorted ascending, as TensorFlow requires): the top has last id + 1 rows,
a shape that follows the data. As the tool chain reads them, ids longer than the data's
rows are cut to them and shorter ones padded with the last id; a segment no row names is
0 (PROD: 1).

Quantized (SUM, as the tool chain): D = q + zp_in summed per segment (int64), then
requantized by `scale_value`/`shift_value` (M/2^s ~ s_out / s_in, at most 15-bit M) into
the top, signed when the input is. The tool chain computes the other methods in neither
float nor integers (its SegmentReduce is SUM only): npuopt keeps them in float."""
import torch

from ..dtype import computing_float
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._layout import param_choice
from ._segments import segment_count, segment_reduce, segment_sums

METHODS = ["SUM", "MEAN", "MAX", "MIN", "PROD"]
REDUCTIONS = {"MEAN": "mean", "MAX": "amax", "MIN": "amin", "PROD": "prod"}
MULTIPLIER_BITS = 16  # the tool chain asks max(16, activation_bits) bits (15 at most are taken)


def _ids(node, rows: int) -> torch.Tensor:
    """The ids as the tool chain takes them: flattened, cut or padded (with the last id) to `rows`."""
    ids = node.inputs[1].betensor.reshape(-1).to(torch.int64)
    segment_count(node, ids)
    if ids.numel() >= rows:
        return ids[:rows]
    return torch.cat([ids, ids[-1:].expand(rows - ids.numel())])


@op_register(OpType.SegmentReduce, "1.0", data_dependent_shapes=True)
def segmentreduce_forward(self, *args):
    check_inputs(self, (2,))
    method = param_choice(self, "method", METHODS, "SUM")
    data_t, out = self.inputs[0], self.outputs[0]
    ids = _ids(self, data_t.betensor.shape[0])
    count = segment_count(self, ids)
    if self.quantized:
        sums = segment_sums(data_t.betensor.to(torch.int64) + int(data_t.zerop), ids, count)
        r = Rescale.read(self)
        return QT.store_output(self, qmath.requantize(sums, r.multiplier, r.shift, out.zerop, out.qmin, out.qmax), out)
    data = computing_float(data_t.betensor)
    out.betensor = segment_sums(data, ids, count) if method == "SUM" else \
        segment_reduce(data, ids, count, REDUCTIONS[method])
    return out.betensor


@quant_register(OpType.SegmentReduce, "1.0")
def segmentreduce_quantize(self, *args):
    if param_choice(self, "method", METHODS, "SUM") != "SUM":
        raise QT.Unsupported(f"layer '{self.name}' (SegmentReduce): the tool chain quantizes method SUM only")
    QT.check_quantized_inputs(self)
    data_t, out = self.inputs[0], self.outputs[0]
    QT.quantize_activation(self, out, signed=data_t.dtype.is_signed)
    bits = max(MULTIPLIER_BITS, settings_of(self).activation_bits)
    Rescale.from_ratio(out.scale / data_t.scale, bits).write(self)
