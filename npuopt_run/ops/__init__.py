"""The table of layer type -> forward: one float and one integer forward per
type. A layer that computes in integers (runner.computes_in_integers, the tool
chain's rule) runs the integer forward; a layer left in float (mixed precision)
runs the float one. `reads_other_kind` marks the boundary layers (Quantize reads
floats, DeQuantize integers); `data_dependent_shapes` the layers whose top shapes follow
their input values (a module's DATA_DEPENDENT_SHAPES): the IR's top shapes are bounds
there; `reads_integers` the float layers that compute on integers as they are, scaled or
not (a module's READS_INTEGERS: a pre-quantized source's integer layers). Every module of this package that defines FLOAT and
INT (dicts layer type -> forward) joins the table: a new op family is a new file."""
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, Optional


@dataclass(frozen=True)
class Op:
    float_fn: Optional[Callable]
    int_fn: Optional[Callable]
    reads_other_kind: bool = False
    data_dependent_shapes: bool = False
    reads_integers: bool = False  # its float forward takes integers as they are, scaled or not


def _table(*modules) -> Dict[str, Op]:
    types = sorted(set().union(*(set(m.FLOAT) | set(m.INT) for m in modules)))
    floats = {k: v for m in modules for k, v in m.FLOAT.items()}
    ints = {k: v for m in modules for k, v in m.INT.items()}
    reads_other_kind = set().union(*(getattr(m, "READS_OTHER_KIND", ()) for m in modules))
    from_data = set().union(*(getattr(m, "DATA_DEPENDENT_SHAPES", ()) for m in modules))
    integers = set().union(*(getattr(m, "READS_INTEGERS", ()) for m in modules))
    table = {t: Op(floats.get(t), ints.get(t), t in reads_other_kind, t in from_data, t in integers) for t in types}
    table["Input"] = Op(None, None)  # the runner feeds inputs itself
    return table


def _op_modules():
    modules = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    return [m for m in modules if hasattr(m, "FLOAT") and hasattr(m, "INT")]


OPS = _table(*_op_modules())
# layer types whose tops' first axis counts the iterations they ran (a Loop's scan outputs), which
# the IR's shape does not bound (a module's ITERATIONS_FIRST_AXIS)
ITERATIONS_FIRST_AXIS = frozenset().union(*(getattr(m, "ITERATIONS_FIRST_AXIS", ()) for m in _op_modules()))
