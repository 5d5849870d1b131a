"""A global calibration method's params as the cfg writes them after its name,
`method[v0, v1, ...]`, read by the method's own table of names and defaults."""
from typing import List

from ...errors import ConfigError


def read_params(method: str, values: List[float], spec) -> dict:
    """OPT's positional params `method[v0, v1, ...]` by the names and defaults of
    `spec` [(name, default, minimum, integer)], checked into one-line ConfigErrors."""
    if len(values) > len(spec):
        names = ", ".join(name for name, *_ in spec)
        raise ConfigError(f"field 'global_calibration': {method} takes at most {len(spec)} params "
                          f"[{names}], got {len(values)}")
    out = {}
    for i, (name, default, minimum, integer) in enumerate(spec):
        v = values[i] if i < len(values) else default
        if v < minimum or (integer and v != int(v)):
            what = "an integer" if integer else "a number"
            raise ConfigError(f"field 'global_calibration': {method}'s {name} must be {what} >= {minimum:g}, got {v:g}")
        out[name] = int(v) if integer else float(v)
    return out
