"""OPT's ops/pooling.py helpers: the Pooling forward and quantize (npuopt's), which its
GlobalPool file runs with the kernel it sets."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ._base import delegate

pooling = delegate(OP_FORWARDS, OpType.Pooling)
pooling_quantize = delegate(OP_QUANTIZERS, OpType.Pooling)
