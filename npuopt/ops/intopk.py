"""InTopK (TensorFlow's in_top_k): input 0 the predictions [batch, classes], input 1 the
target class of each row ([batch], or with axes of size 1); `k` (required). Top: 1 (uint8)
where the target's prediction is among the row's k largest values (k at most the
classes), counting ties: any class whose value equals one of the k largest is in. A
target outside [0, classes) is not in (TensorFlow's rule).

Quantized, as the tool chain: the same on the stored integers (their order is the real
values'), the top unscaled uint8 (int8 with force_dtype_int)."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import index_output_quantization, int_param

OUT_BITS = 8


@op_register(OpType.InTopK, "1.0")
def intopk_forward(self, *args):
    check_inputs(self, (2,))
    predictions, targets = self.inputs[0].betensor, self.inputs[1].betensor.reshape(-1).to(torch.int64)
    if predictions.dim() != 2 or predictions.shape[0] != targets.numel():
        raise IRError(f"layer '{self.name}' (InTopK): predictions must be [batch, classes] with one target per "
                      f"row, got {list(predictions.shape)} and {targets.numel()} targets")
    classes = predictions.shape[1]
    k = min(int_param(self, "k", minimum=0), classes)
    valid = (targets >= 0) & (targets < classes)
    picked = predictions.gather(1, targets.clamp(0, max(classes - 1, 0))[:, None])
    top = torch.topk(predictions, k, dim=1).values
    hit = (top == picked).any(dim=1) & valid
    out = self.outputs[0]
    if self.quantized:
        return QT.store_output(self, hit, out)
    out.betensor = hit.to(torch.uint8)
    return out.betensor


@quant_register(OpType.InTopK, "1.0")
def intopk_quantize(self, *args):
    QT.check_quantized_inputs(self)
    index_output_quantization(self, self.outputs[0], OUT_BITS, bool(self.force_dtype_int))
