"""Dynamic shapes: an IR whose header names `dynamic_symbols` (e.g. `[past]`) runs on inputs
whose lengths vary, up to the lengths its shapes state, as the tool chain runs it
(the Compass Optimizer's update_dynamic_symbols).

The parser's fields: the header's `dynamic_symbols`; on each layer `ds_output_shape`, the
shape of each top as expressions in the symbols (`[[1,3,(past+1),64]]`); on a Slice
`ds_begin`/`ds_end`/`ds_strides` beside `begin`/`end`/`strides`. A graph input's
`ds_output_shape` names the symbols its axes carry; a forward gives each symbol the length
of its axis in the input fed (at most the IR's), and while the layers run the graph is the
static IR of those lengths: every layer's top shapes, a Slice's begin/end/strides and a
Reshape's shape are the fields' values (`bound`). Outside a forward the IR keeps its own
shapes (the largest) and fields, which the quantized IR carries on unchanged.
"""
import ast
import math
from contextlib import contextmanager
from typing import Dict, List, Sequence

from .errors import GraphError, IRError
from .tensor import TensorShape

SYMBOLS = "dynamic_symbols"   # the header key
SHAPES = "ds_output_shape"    # the layer param of its top shapes
PREFIX = "ds_"                # ds_<param>: the expressions of <param>

_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.Pow: lambda a, b: a ** b}
_FUNCTIONS = {"ceil": lambda a: math.ceil(a), "max": max, "min": min}


def evaluate(value, symbols: Dict[str, int]):
    """An int, an expression in the symbols (the parser's syntax: integers, + - * / // % **,
    parentheses, ceil/max/min) whose value is a whole number, or a (nested) list of them."""
    if isinstance(value, (list, tuple)):
        return [evaluate(v, symbols) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise IRError(f"dynamic-shape value {value!r} is not an integer or an expression")
    if isinstance(value, int):
        return value
    try:
        tree = ast.parse(value.strip(), mode="eval").body
    except SyntaxError:
        raise IRError(f"cannot read dynamic-shape expression '{value}'") from None
    try:
        result = _node_value(tree, value, symbols)
    except (ZeroDivisionError, TypeError, OverflowError) as e:
        raise IRError(f"cannot evaluate dynamic-shape expression '{value}': {e}") from None
    if result != int(result):
        raise IRError(f"dynamic-shape expression '{value}' is {result}, not a whole number")
    return int(result)


def _node_value(node, text: str, symbols: Dict[str, int]):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in symbols:
            raise IRError(f"dynamic-shape expression '{text}' names '{node.id}', not a dynamic symbol "
                          f"({', '.join(symbols) or 'none bound'})")
        return symbols[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _node_value(node.operand, text, symbols)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_node_value(node.left, text, symbols), _node_value(node.right, text, symbols))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and node.args and not node.keywords:
        return _FUNCTIONS[node.func.id](*[_node_value(a, text, symbols) for a in node.args])
    raise IRError(f"dynamic-shape expression '{text}': '{ast.unparse(node)}' is not integer arithmetic")


def names(graph) -> List[str]:
    """The header's dynamic symbols (none for a static IR)."""
    value = graph.header.get(SYMBOLS, [])
    return [str(v) for v in (value if isinstance(value, list) else [value])]


def symbols_of(graph, inputs: Sequence) -> Dict[str, int]:
    """Each dynamic symbol's value: the length of the input axis its graph input's
    ds_output_shape names it on; within 1..the IR's length there, the same wherever named."""
    wanted = names(graph)
    found: Dict[str, int] = {}
    producers = {t.name: node for node in graph.nodes for t in node.outputs}
    for t, value in zip(graph.input_tensors, inputs):
        node = producers[t.name]
        exprs = node.params.get(SHAPES, [[]])[0]
        if not isinstance(exprs, list) or len(exprs) != value.dim():
            continue
        for axis, (expr, size) in enumerate(zip(exprs, value.shape)):
            if not (isinstance(expr, str) and expr in wanted):
                continue
            top = int(t.ir_shape[axis])
            if not 1 <= size <= top:
                raise GraphError(f"input '{t.name}' has length {size} on axis {axis} ({expr}); the IR takes "
                                 f"1 to {top} there")
            if found.setdefault(expr, size) != size:
                raise GraphError(f"input '{t.name}' gives {expr}={size}, another input {expr}={found[expr]}")
    missing = [s for s in wanted if s not in found]
    if missing:
        raise GraphError(f"graph '{graph.name}': no graph input's ds_output_shape names dynamic symbol "
                         f"'{missing[0]}'")
    return found


@contextmanager
def bound(graph, symbols: Dict[str, int]):
    """The graph as the static IR of `symbols` while the block runs: top shapes from each
    layer's ds_output_shape, param P from ds_P, a Reshape's shape its top's; restored after."""
    saved = []
    try:
        for node in graph.nodes:
            for key, value in list(node.params.items()):
                if key == SHAPES:
                    shapes = evaluate(value, symbols)
                    if len(shapes) != len(node.outputs):
                        raise IRError(f"layer '{node.name}' ({node.type}): {SHAPES} has {len(shapes)} shapes for "
                                      f"{len(node.outputs)} tops")
                    for t, shape in zip(node.outputs, shapes):
                        saved.append((t, "ir_shape", t.ir_shape))
                        t.ir_shape = TensorShape(shape)
                    if node.type == "Reshape" and "shape" in node.params:
                        saved.append((node.params, "shape", node.params["shape"]))
                        node.params["shape"] = list(shapes[0])
                elif key.startswith(PREFIX) and key[len(PREFIX):] in node.params:
                    base = key[len(PREFIX):]
                    saved.append((node.params, base, node.params[base]))
                    node.params[base] = evaluate(value, symbols)
        yield
    finally:
        for owner, key, value in reversed(saved):
            if isinstance(owner, dict):
                owner[key] = value
            else:
                setattr(owner, key, value)
