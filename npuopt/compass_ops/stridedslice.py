"""OPT's ops/stridedslice.py helpers: the strided slice (begin, end, strides) forward and
quantize (npuopt's Slice), which its Slice file runs."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate

stridedslice = delegate(OP_FORWARDS, OpType.Slice)
stridedslice_quantize = delegate(OP_QUANTIZERS, OpType.Slice)
