"""OPT's ops/pad.py helper: the Pad forward (npuopt's)."""
from ..registry import OP_FORWARDS, OpType
from ._base import delegate

pad = delegate(OP_FORWARDS, OpType.Pad)
