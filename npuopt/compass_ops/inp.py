"""OPT's ops/inp.py helper: the Input quantize (npuopt's), which its Constant file runs."""
from ..registry import OP_QUANTIZERS, OpType
from ._base import delegate

inp_quantize = delegate(OP_QUANTIZERS, OpType.Input)
