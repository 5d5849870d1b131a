"""What the adapter modules share: running npuopt's own functions from a plugin's."""
import functools
from typing import Callable, Dict, Tuple

from ..errors import PluginError
from ..registry import Registry
from ..tensor import opt_form

_BUILTINS: Dict[Tuple[str, str], Callable] = {}


def in_npuopt_form(fn: Callable) -> Callable:
    """fn with tensors in npuopt's form (per-tensor scale and zerop as numbers), the form
    npuopt's functions take; a plugin's own code around the call keeps OPT's form."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with opt_form(False):
            return fn(*args, **kwargs)
    return run


def builtin(registry: Registry, optype: str) -> Callable:
    """npuopt's own function for `optype` in `registry` (whatever a user's plugin registered)."""
    key = (registry.what, optype)
    if key not in _BUILTINS:
        regs = [r for r in registry.all() if r.key == optype and r.builtin]
        if not regs:
            raise PluginError(f"npuopt has no built-in {registry.what} for '{optype}'")
        _BUILTINS[key] = max(regs, key=lambda r: r.version_key).obj
    return _BUILTINS[key]


def delegate(registry: Registry, *optypes: str) -> Callable:
    """OPT's function that computes (or quantizes) one op on a layer of another type (its
    Add on Eltwise, its LayerNorm on GroupNorm, ...): npuopt's own for the layer's type when
    it is one of `optypes`, else for optypes[0]; the caller sets the params it reads.
    Quantized inputs that OPT's files held as floats are given their integer type first."""
    def run(self, *args):
        optype = self.type if self.type in optypes else optypes[0]
        for t in self.inputs if self.quantized else ():
            if t.is_quantized and t.betensor.is_floating_point():
                t.betensor = t.betensor.to(t.dtype.torch_dtype)
        with opt_form(False):
            return builtin(registry, optype)(self, *args)
    return run


def not_approximated(self, *args):
    """OPT's `*_approx` functions plan the chip's approximation of a float layer; npuopt keeps
    float layers exact (it never calls approximate functions), so this plans nothing."""
