"""OPT's ops/bn.py helpers: the BatchNorm forward and quantize (npuopt's), which its
BiasAdd file runs with all-one weights."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ..utils import *  # noqa: F401,F403  (OPT's module hands these on to a star import)
from ._base import delegate

batch_norm = delegate(OP_FORWARDS, OpType.BatchNorm)
batch_norm_quantize = delegate(OP_QUANTIZERS, OpType.BatchNorm)
