"""OPT's ops/groupnorm.py helpers: OPT computes GroupNorm, LayerNorm, InstanceNorm and
MVN in one function, by the layer's type; here npuopt's own forward and quantize of that
type. OPT's function names an MVN's rescale `norm_scale`/`norm_shift` (its MVN file
renames them `scale`/`shift` after quantizing, and back, with scale 1 and shift 0 in
their place, around the forward); so do these."""
from ..registry import OP_FORWARDS, OP_QUANTIZERS, OpType
from ._base import delegate

_NORMS = (OpType.GroupNorm, OpType.LayerNorm, OpType.InstanceNorm, OpType.MVN)
_forward, _quantize = delegate(OP_FORWARDS, *_NORMS), delegate(OP_QUANTIZERS, *_NORMS)
_MVN_NAMES = {f"{k}_{s}": f"norm_{k}_{s}" for k in ("scale", "shift") for s in ("value", "type")}


def groupnorm_quantize(self, *args) -> None:
    _quantize(self, *args)
    if self.type == OpType.MVN:
        for ours, opts in _MVN_NAMES.items():
            self.params[opts] = self.params.pop(ours)


def groupnorm(self, *args):
    if self.type != OpType.MVN or not self.quantized:
        return _forward(self, *args)
    saved = {ours: self.params[ours] for ours in _MVN_NAMES if ours in self.params}
    self.params.update({ours: self.params[opts] for ours, opts in _MVN_NAMES.items()})
    try:
        return _forward(self, *args)
    finally:
        self.params.update(saved)
