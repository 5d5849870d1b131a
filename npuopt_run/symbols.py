"""IRs with dynamic shapes: the header's `dynamic_symbols` (e.g. [past]) name lengths that the
graph inputs carry on the axes their `ds_output_shape` names them on; each layer's
`ds_output_shape` gives its top shapes, a `ds_<param>` its param, as expressions in them
(`(past+1)`). A run binds each symbol to its input's length (at most the IR's) and runs the
static model of those lengths: `bind` makes it, shapes and params evaluated.
"""
import dataclasses
import re
from typing import Dict, List, Sequence

from .errors import RefrunError
from .irfile import Model

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\*\*|//|[-+*/%(),]))")


class _Expression:
    """Arithmetic as the parser prints it: + - * / // % ** (right-associative), unary
    minus, parentheses, ceil/max/min calls; names are the bound symbols. The value must
    be a whole number (ceil(past/2) is; past/2 at an odd past is not)."""

    def __init__(self, text: str, values: Dict[str, int]):
        self.text, self.values, self.tokens, self.at = text, values, [], 0
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if not m:
                raise RefrunError(f"dynamic-shape expression '{text}': unexpected '{text[pos:].strip()}'")
            self.tokens.append(m.group(1) or m.group(2) or m.group(3))
            pos = m.end()

    def value(self) -> int:
        v = self._sum()
        if self.at != len(self.tokens):
            raise RefrunError(f"dynamic-shape expression '{self.text}': unexpected '{self.tokens[self.at]}'")
        if v != int(v):
            raise RefrunError(f"dynamic-shape expression '{self.text}' is {v}, not a whole number")
        return int(v)

    def _peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, want=None) -> str:
        tok = self._peek()
        if tok is None or (want is not None and tok != want):
            raise RefrunError(f"dynamic-shape expression '{self.text}': expected {want or 'more'}")
        self.at += 1
        return tok

    def _sum(self) -> int:
        v = self._product()
        while self._peek() in ("+", "-"):
            v = v + self._product() if self._take() == "+" else v - self._product()
        return v

    def _product(self) -> int:
        v = self._power()
        while self._peek() in ("*", "/", "//", "%"):
            op = self._take()
            rhs = self._power()
            v = {"*": v * rhs, "/": v / rhs if rhs else None, "//": v // rhs if rhs else None,
                 "%": v % rhs if rhs else None}[op]
            if v is None:
                raise RefrunError(f"dynamic-shape expression '{self.text}' divides by zero")
        return v

    def _power(self) -> int:
        base = self._unary()
        if self._peek() == "**":
            self._take()
            return base ** self._power()
        return base

    def _unary(self) -> int:
        if self._peek() in ("-", "+"):
            return -self._unary() if self._take() == "-" else self._unary()
        tok = self._take()
        if tok == "(":
            v = self._sum()
            self._take(")")
            return v
        if tok.isdigit():
            return int(tok)
        if tok in ("ceil", "max", "min") and self._peek() == "(":
            self._take("(")
            args = [self._sum()]
            while self._peek() == ",":
                self._take()
                args.append(self._sum())
            self._take(")")
            return -(-args[0] // 1) if tok == "ceil" else max(args) if tok == "max" else min(args)
        if tok in self.values:
            return self.values[tok]
        raise RefrunError(f"dynamic-shape expression '{self.text}': '{tok}' is not a dynamic symbol")


def evaluated(value, values: Dict[str, int]):
    """Ints as they are, expressions (strings) evaluated, lists element by element."""
    if isinstance(value, list):
        return [evaluated(v, values) for v in value]
    if isinstance(value, str):
        return _Expression(value, values).value()
    return value


def symbols(model: Model) -> List[str]:
    names = model.header.get("dynamic_symbols", [])
    return [str(n) for n in (names if isinstance(names, list) else [names])]


def lengths(model: Model, shapes: Sequence[Sequence[int]]) -> Dict[str, int]:
    """The symbols' lengths the input shapes (one per graph input, batch first) carry."""
    wanted, found = symbols(model), {}
    producers = {t: layer for layer in model.layers for t in layer.tops}
    for name, shape in zip(model.inputs, shapes):
        layer = producers[name]
        exprs = layer.param("ds_output_shape", [[]])[0]
        if not isinstance(exprs, list) or len(exprs) != len(shape):
            continue
        for axis, (expr, size) in enumerate(zip(exprs, shape)):
            if expr not in wanted:
                continue
            most = layer.top_shapes[0][axis]
            if not 1 <= size <= most:
                raise RefrunError(f"input '{name}' has length {size} on axis {axis} ({expr}); the IR takes 1 to "
                                  f"{most} there")
            if found.setdefault(expr, size) != size:
                raise RefrunError(f"input '{name}' has {expr}={size}, another input {expr}={found[expr]}")
    return found


def bind(model: Model, shapes: Sequence[Sequence[int]]) -> Model:
    """The model as the static IR of the inputs' lengths; the model itself when it is
    static or inputs of other ranks leave a symbol unbound (the run then checks them
    against its largest shapes)."""
    values = lengths(model, shapes)
    if not symbols(model) or set(values) != set(symbols(model)):
        return model
    layers = []
    for layer in model.layers:
        params = dict(layer.params)
        tops = layer.top_shapes
        for key, value in layer.params.items():
            if key == "ds_output_shape":
                tops = [tuple(s) for s in evaluated(value, values)]
                if len(tops) != len(layer.tops):
                    raise layer.error(f"ds_output_shape gives {len(tops)} shapes for {len(layer.tops)} tops",
                                      "ds_output_shape")
            elif key.startswith("ds_") and key[3:] in params:
                params[key[3:]] = evaluated(value, values)
        if layer.type == "Reshape" and "shape" in params:
            params["shape"] = list(tops[0])
        layers.append(dataclasses.replace(layer, top_shapes=tops, params=params))
    header = {k: v for k, v in model.header.items() if k != "dynamic_symbols"}
    return dataclasses.replace(model, layers=layers, header=header)
