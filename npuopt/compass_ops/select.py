"""OPT's ops/select.py helpers: the Where forward and quantize (npuopt's)."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate

select_forward = delegate(OP_FORWARDS, OpType.Where)
select_quantize = delegate(OP_QUANTIZERS, OpType.Where)
