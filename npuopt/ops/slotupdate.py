"""SlotUpdate (BEVFormer's spatial cross-attention, QueryRebatch's way back; the parser
merges its pattern of Gathers, Adds and ScatterNDs): input 0 the per-camera queries
[N, K, L, C...], inputs 1..K one list of slot indices per camera (1-D integers, no batch
axis, at most L long). Top [N, Q, C...] (Q from the IR): zeros, then for each camera k and
each j, top[:, index_k[j]] += queries[:, k, j]; the cameras in order, a repeated index adds
again.

Quantized, as the tool chain: the sums of A = q + zp_in (exact integers), then
requantize(sum, M, s) into the top (`scale_value`/`shift_value`: the ratio of the top's
scale to the input's with activation_bits multipliers; `shift_type` int8), so a slot no
camera reaches holds the top's real 0. An integer (unscaled) input keeps the layer in
float."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import SHIFT_DTYPE
from ..registry import OpType, op_register, quant_register
from .overlapadd import requantized_sums, sums_rescale
from .queryrebatch import camera_lists


@op_register(OpType.SlotUpdate, "1.0")
def slotupdate_forward(self, *args):
    queries = self.inputs[0].betensor
    slots = [int(d) for d in self.outputs[0].ir_shape]
    if queries.dim() < 3 or len(slots) != queries.dim() - 1 or slots[2:] != list(queries.shape[3:]):
        raise IRError(f"layer '{self.name}' (SlotUpdate): queries {list(queries.shape)} do not fit the top "
                      f"{slots} ([N, K, L, C...] into [N, Q, C...])")
    lists = camera_lists(self, slots[1])
    if len(lists) != queries.shape[1]:
        raise IRError(f"layer '{self.name}' (SlotUpdate): {len(lists)} index lists for queries of "
                      f"{queries.shape[1]} cameras (their second axis)")
    for k, idx in enumerate(lists):
        if idx.numel() > queries.shape[2]:
            raise IRError(f"layer '{self.name}' (SlotUpdate): index list {k + 1} has {idx.numel()} entries for "
                          f"{queries.shape[2]} queries per camera")
    if self.quantized:
        values = QT.shifted(self.inputs[0])
    else:
        values = computing_float(queries)
    out = torch.zeros((queries.shape[0], slots[1]) + tuple(queries.shape[3:]), dtype=values.dtype,
                      device=queries.device)
    for k, idx in enumerate(lists):
        out.index_add_(1, idx.to(out.device), values[:, k, :idx.numel()])
    if self.quantized:
        return requantized_sums(self, out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.SlotUpdate, "1.0")
def slotupdate_quantize(self, *args):
    rescale = sums_rescale(self)
    rescale.shift_type = SHIFT_DTYPE   # the tool chain writes int8 whatever the shift
    rescale.write(self)
