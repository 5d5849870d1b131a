"""MaxUnpool: the inverse of MaxPoolingWithArgMax (ONNX MaxUnpool): values written at the
positions their indices name in the top of `output_shape`, `flatten_dim` as the indices
were made (the parser writes NCHW for ONNX's); `storage_order` is accepted and, as in the tool
chain, not used. Computed as UpsampleByIndex (_unpool.py)."""
from ..registry import OpType, op_register, quant_register
from ._unpool import unpool, unpool_quantize


@op_register(OpType.MaxUnpool, "1.0")
def maxunpool_forward(self, *args):
    return unpool(self, "output_shape")


@quant_register(OpType.MaxUnpool, "1.0")
def maxunpool_quantize(self, *args):
    unpool_quantize(self)
