"""Dilation: grey-scale dilation of an NHWC input by one structuring element per channel
(TensorFlow's dilation2d); the computation and its quantized form are in _morphology.py."""
from ..registry import OpType, op_register, quant_register
from ._morphology import morphology_forward, morphology_quantize


@op_register(OpType.Dilation, "1.0")
def dilation_forward(self, *args):
    return morphology_forward(self, erosion=False)


@quant_register(OpType.Dilation, "1.0")
def dilation_quantize(self, *args):
    morphology_quantize(self)
