"""Control flow: If and Loop run the subgraph sections their params name (the runner
gives each layer `subgraph_runs`: param -> a run of that section on a list of values).
The tool chain keeps If, Loop and their sections in float.

If: input 0 (one value) picks then_branch (nonzero: inputs 1..then_branch_inputs_num)
or else_branch (the else_branch_inputs_num inputs after those); its tops are the
branch's outputs.
Loop: while i < the trip count (input 0) and the condition (input 1, then the body's
output 0) is nonzero, the body runs on [i, condition, the dependency_inputs_num carried
values, the other inputs unchanged]; its outputs 1..N are the next carried values, its
outputs N+1.. are stacked over the iterations (np.vstack: a scalar becomes a row). The
tops: the carried values after the last iteration (the inputs after none), then the
stacked scan outputs (empty after none), whose first axis counts the iterations: the
shapes follow the data (a graph with a Loop runs a batch as one, as the tool chain does),
and the IR does not bound that axis (the parser writes the count of its own run)."""
from typing import List

import numpy as np

DATA_DEPENDENT_SHAPES = ("Loop",)
ITERATIONS_FIRST_AXIS = ("Loop",)


def _count(layer, key: str) -> int:
    value = layer.param(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise layer.error(f"{key} must be a non-negative integer, got {value!r}", key)
    return value


def _run(layer, key: str, values: List[np.ndarray], outputs: int) -> List[np.ndarray]:
    if key not in layer.subgraph_runs:
        raise layer.error(f"{key} '{layer.param(key)}' names no subgraph section", key)
    got = layer.subgraph_runs[key](values)
    if len(got) != outputs:
        raise layer.error(f"{key} '{layer.param(key)}' gives {len(got)} outputs, {outputs} expected", key)
    return got


def _one(layer, x: np.ndarray, what: str):
    if x.size != 1:
        raise layer.error(f"{what} holds {x.size} values, not one")
    return x.reshape(-1)[0]


def if_float(layer, xs, infos):
    n_then, n_else = _count(layer, "then_branch_inputs_num"), _count(layer, "else_branch_inputs_num")
    if len(xs) != 1 + n_then + n_else:
        raise layer.error(f"{len(xs)} inputs for 1 + then_branch_inputs_num + else_branch_inputs_num = "
                          f"{1 + n_then + n_else}")
    if _one(layer, xs[0], "the condition") != 0:
        return _run(layer, "then_branch", xs[1:1 + n_then], len(layer.tops))
    return _run(layer, "else_branch", xs[1 + n_then:], len(layer.tops))


def loop_float(layer, xs, infos):
    carried, scans = _count(layer, "dependency_inputs_num"), _count(layer, "scan_outputs_num")
    if len(xs) < 2 + carried or len(layer.tops) != carried + scans:
        raise layer.error(f"{len(xs)} inputs and {len(layer.tops)} tops for dependency_inputs_num {carried} and "
                          f"scan_outputs_num {scans}")
    trips = float(_one(layer, xs[0], "the trip count"))
    cond = _one(layer, xs[1], "the condition")
    feed = list(xs)
    rows: List[List[np.ndarray]] = [[] for _ in range(scans)]
    i = 0
    while i < trips and cond != 0:
        feed[0] = np.full(np.shape(xs[0]), i, dtype=np.int64)
        outs = _run(layer, "body", feed, 1 + carried + scans)
        cond = _one(layer, outs[0], "the body's condition")
        feed = feed[:1] + outs[:1 + carried] + feed[2 + carried:]
        for k in range(scans):
            rows[k].append(outs[1 + carried + k])
        i += 1
    stacked = [np.vstack(r) if r else np.zeros((0,) + tuple(layer.top_shapes[carried + k][1:]))
               for k, r in enumerate(rows)]
    return feed[2:2 + carried] + stacked


FLOAT = {"If": if_float, "Loop": loop_float}
INT = {}
