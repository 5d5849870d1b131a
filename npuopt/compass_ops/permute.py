"""OPT's ops/permute.py helpers: the Transpose forward and quantize (npuopt's)."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate

permute = delegate(OP_FORWARDS, OpType.Transpose)
permute_quantize = delegate(OP_QUANTIZERS, OpType.Transpose)
