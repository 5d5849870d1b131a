"""UpsampleByIndex: values written at the positions their indices name in a larger top
(the caffe SegNet upsampling); `flatten_dim` HW, HWC, NHWC or NCHW, `shape` the top's
shape. Computed as MaxUnpool (_unpool.py)."""
from ..registry import OpType, op_register, quant_register
from ._unpool import unpool, unpool_quantize


@op_register(OpType.UpsampleByIndex, "1.0")
def upsamplebyindex_forward(self, *args):
    return unpool(self, "shape")


@quant_register(OpType.UpsampleByIndex, "1.0")
def upsamplebyindex_quantize(self, *args):
    unpool_quantize(self)
