"""OPT's ops/interp.py helpers: the resize forward and quantize (npuopt's Resize), which
its Resize file runs."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate

interp = delegate(OP_FORWARDS, OpType.Resize)
interp_quantize = delegate(OP_QUANTIZERS, OpType.Resize)
