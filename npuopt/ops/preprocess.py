"""Preprocess: the layer the parser puts after the graph inputs when a parser plugin of
that name is installed (its back pass `insert_preprocess`; the Compass Optimizer has no
such op). As the parser defines it (ArmPreprocessOp): one top per input, each a copy of its
input, which is what Dummy computes, so both share its forward.

Quantized: the same integers, each top on its input's grid (nothing is computed, so no
rescale; npuopt-run checks the grids)."""
from ..registry import OpType, op_register, quant_register
from .dummy import dummy_forward, dummy_quantize

op_register(OpType.Preprocess, "1.0")(dummy_forward)
quant_register(OpType.Preprocess, "1.0")(dummy_quantize)
