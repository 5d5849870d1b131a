"""Erosion: grey-scale erosion of an NHWC input by one structuring element per channel
(TensorFlow's erosion2d, the element reflected); the computation and its quantized form
are in _morphology.py."""
from ..registry import OpType, op_register, quant_register
from ._morphology import morphology_forward, morphology_quantize


@op_register(OpType.Erosion, "1.0")
def erosion_forward(self, *args):
    return morphology_forward(self, erosion=True)


@quant_register(OpType.Erosion, "1.0")
def erosion_quantize(self, *args):
    morphology_quantize(self)
