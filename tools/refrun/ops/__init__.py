"""The table of layer type -> forward: one float and one integer forward per
type. A layer that computes in integers (runner.computes_in_integers, the tool
chain's rule) runs the integer forward; a layer left in float (mixed precision)
runs the float one. `reads_other_kind` marks the boundary layers (Quantize reads
floats, DeQuantize integers)."""
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from . import activation, conv, elementwise, former, pool, resize, shape


@dataclass(frozen=True)
class Op:
    float_fn: Optional[Callable]
    int_fn: Optional[Callable]
    reads_other_kind: bool = False


def _table(*modules) -> Dict[str, Op]:
    types = sorted(set().union(*(set(m.FLOAT) | set(m.INT) for m in modules)))
    floats = {k: v for m in modules for k, v in m.FLOAT.items()}
    ints = {k: v for m in modules for k, v in m.INT.items()}
    table = {t: Op(floats.get(t), ints.get(t), t in shape.READS_OTHER_KIND) for t in types}
    table["Input"] = Op(None, None)  # the runner feeds inputs itself
    return table


OPS = _table(activation, conv, elementwise, former, pool, resize, shape)
