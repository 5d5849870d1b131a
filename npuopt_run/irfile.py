"""The runner's own reader of the IR (graph .txt + weights .bin).

Written from ../shared/docs/ir-format.md alone, not from npuopt's reader, so
that a misreading in one of them shows up as a disagreement between the two.
Every error names the file, the line and the layer where it can.
"""
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .errors import RefrunError
from .minifloat import FORMATS as MINIFLOAT_FORMATS
from .minifloat import decode as decode_minifloat


@dataclass(frozen=True)
class DType:
    name: str
    storage: str      # NumPy dtype of one element in the .bin (little endian)
    bits: int
    is_int: bool
    signed: bool

    @property
    def minifloat(self) -> bool:
        """A scaled fp8/fp4 format (minifloat.py): quantized values that are not integers."""
        return self.name in MINIFLOAT_FORMATS

    @property
    def qmin(self) -> int:
        if self.minifloat:
            return -self.qmax
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        if self.minifloat:
            return int(MINIFLOAT_FORMATS[self.name][3])
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


def _dtypes() -> Dict[str, DType]:
    table = [("float32", "<f4", 32, False, True), ("float16", "<f2", 16, False, True),
             ("bfloat16", "<u2", 16, False, True), ("float64", "<f8", 64, False, True),
             ("bool", "u1", 8, False, False)]
    table += [(name, "u1", bits, False, True) for name, bits in  # minifloats: one byte per value
              (("float8_e4m3fn", 8), ("float8_e5m2", 8), ("float4_e2m1fn", 4))]
    for name, bits, storage in (("aligned_int4", 4, "1"), ("int8", 8, "1"), ("aligned_int12", 12, "2"),
                                ("int16", 16, "2"), ("int32", 32, "4"), ("int64", 64, "8")):
        # the aligned types take a whole byte (int4) or two (int12) per element in the .bin
        table += [(name, f"<i{storage}", bits, True, True),
                  (name.replace("int", "uint"), f"<u{storage}", bits, True, False)]
    dtypes = {name: DType(name, storage, bits, is_int, signed) for name, storage, bits, is_int, signed in table}
    for short in ("int4", "uint4", "int12", "uint12"):  # read as the tool chain's aligned types
        dtypes[short] = dtypes["aligned_" + short]
    return dtypes


DTYPES = _dtypes()

_MISSING = object()
_INT = re.compile(r"[+-]?\d+\Z")
_NUMPY_SCALAR = re.compile(r"np\.(?:u?int\d+|float\d+)\((.*)\)\Z")  # NumPy 2's repr (the parser's lists)
_TOKENS = re.compile(r"\[|\]|,|[^\[\],]+")


class ValueSyntax(Exception):
    """A value that does not parse; turned into a RefrunError with file and line."""


def parse_value(text: str):
    """An IR value: int, float, true/false, a bare word, or a (nested) bracketed list."""
    tokens = [t.strip() for t in _TOKENS.findall(text.strip())]
    tokens = [t for t in tokens if t]
    if not tokens:
        raise ValueSyntax("empty value")
    value, pos = _parse_tokens(tokens, 0)
    if pos != len(tokens):
        raise ValueSyntax(f"unexpected '{tokens[pos]}' after the value")
    return value


def _parse_tokens(tokens: List[str], pos: int):
    tok = tokens[pos]
    if tok == "[":
        items = []
        pos += 1
        if pos < len(tokens) and tokens[pos] == "]":
            return items, pos + 1
        while pos < len(tokens):
            if tokens[pos] in (",", "]"):
                raise ValueSyntax("empty list item")
            item, pos = _parse_tokens(tokens, pos)
            items.append(item)
            if pos >= len(tokens):
                break
            if tokens[pos] == "]":
                return items, pos + 1
            if tokens[pos] != ",":
                raise ValueSyntax(f"expected ',' or ']' before '{tokens[pos]}'")
            pos += 1
        raise ValueSyntax("unclosed '['")
    if tok in (",", "]"):
        raise ValueSyntax(f"unexpected '{tok}'")
    return _scalar(tok), pos + 1


def parse_names(text: str) -> List[str]:
    """A flat bracketed list of tensor names, kept as written (a name may look like a number)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or "[" in text[1:-1] or "]" in text[1:-1]:
        raise ValueSyntax("expected a flat bracketed list of names")
    names = [n.strip() for n in text[1:-1].split(",")] if text[1:-1].strip() else []
    if "" in names:
        raise ValueSyntax("empty name in the list")
    return names


def _scalar(tok: str):
    numpy_scalar = _NUMPY_SCALAR.match(tok)
    if numpy_scalar:
        tok = numpy_scalar.group(1)
    if tok in ("true", "false"):
        return tok == "true"
    if _INT.match(tok):
        return int(tok)
    if any(c.isdigit() for c in tok) or tok.lower().lstrip("+-") in ("inf", "nan"):
        try:
            return float(tok)
        except ValueError:
            pass
    return tok


@dataclass
class Layer:
    name: str
    type: str
    path: str
    line: int
    lines: Dict[str, int]
    bottoms: List[str]
    tops: List[str]
    top_shapes: List[Tuple[int, ...]]
    top_types: List[DType]
    top_scales: Optional[list]
    top_zps: Optional[list]
    top_ranges: Optional[list]
    params: Dict[str, object] = field(default_factory=dict)
    consts: Dict[str, np.ndarray] = field(default_factory=dict)
    const_types: Dict[str, DType] = field(default_factory=dict)
    subgraphs: Dict[str, "Model"] = field(default_factory=dict)  # param -> the subgraph section it names
    subgraph_runs: Dict[str, Callable] = field(default_factory=dict)  # param -> its run (set by the Runner)

    def error(self, message: str, key: str = None) -> RefrunError:
        line = self.lines.get(key, self.line) if key else self.line
        return RefrunError(f"{self.path}:{line}: layer '{self.name}' ({self.type}): {message}")

    def param(self, key: str, default=_MISSING):
        if key in self.params:
            return self.params[key]
        if default is _MISSING:
            raise self.error(f"missing parameter '{key}'")
        return default

    def const(self, name: str) -> np.ndarray:
        if name not in self.consts:
            raise self.error(f"missing constant '{name}' ({name}_type/_offset/_size/_shape)")
        return self.consts[name]

    def has_const(self, name: str) -> bool:
        return name in self.consts

    def top_range(self, i: int = 0) -> Tuple[int, int]:
        """The integer range of top i: its layer_top_range, else its dtype's range."""
        dtype = self.top_types[i]
        if self.top_ranges is None or not dtype.is_int:
            return dtype.qmin, dtype.qmax
        bounds = []
        for v in self.top_ranges[i]:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
                raise self.error(f"layer_top_range entry {v!r} of an integer tensor is not an integer",
                                 "layer_top_range")
            bounds.append(int(v))
        lo, hi = bounds
        if not dtype.qmin <= lo <= hi <= dtype.qmax:
            raise self.error(f"layer_top_range [{lo}, {hi}] of '{self.tops[i]}' is not within {dtype.name} "
                             f"[{dtype.qmin}, {dtype.qmax}]", "layer_top_range")
        return lo, hi


@dataclass
class Model:
    name: str
    path: str
    bin_path: str
    inputs: List[str]
    outputs: List[str]
    layers: List[Layer]
    header: Dict[str, object]
    subgraph: bool = False  # a subgraph section (an If's branch, a Loop's body)


_LAYER_KEYS = ("layer_id", "layer_name", "layer_type", "layer_bottom", "layer_top", "layer_bottom_shape",
               "layer_bottom_type", "layer_top_shape", "layer_top_type", "layer_top_scale", "layer_top_zp",
               "layer_top_range")
_CONST_SUFFIXES = ("_type", "_offset", "_size", "_shape")
_NAME_KEYS = ("input_tensors", "output_tensors", "layer_bottom", "layer_top")


def read_model(txt_path: str, bin_path: Optional[str] = None) -> Model:
    """Parse the graph file and slice every constant out of the weights file; the subgraph
    sections after the model's (`subgraph_name=` headers: If's branches, Loop's bodies)
    become the `subgraphs` of the layers whose params name them."""
    if not os.path.isfile(txt_path):
        raise RefrunError(f"graph file '{txt_path}' not found")
    if bin_path is None:
        bin_path = os.path.splitext(txt_path)[0] + ".bin"
    with open(txt_path, encoding="utf-8", errors="strict") as f:
        try:
            text = f.read()
        except UnicodeDecodeError as e:
            raise RefrunError(f"{txt_path}: not a text file ({e})") from None
    blocks = _blocks(text, txt_path)
    if not blocks:
        raise RefrunError(f"{txt_path}: the graph file is empty")
    sections = [[blocks[0]]]  # the model's header and layers, then each subgraph section's
    for block in blocks[1:]:
        if "subgraph_name" in block:
            sections.append([])
        sections[-1].append(block)
    with _Weights(bin_path) as weights:
        models = [_model(section, txt_path, bin_path, weights, i > 0) for i, section in enumerate(sections)]
    subgraphs = {m.name: m for m in models[1:]}
    for m in models:  # a layer runs the subgraph section that one of its params names (If, Loop)
        for layer in m.layers:
            layer.subgraphs = {k: subgraphs[v] for k, v in layer.params.items() if isinstance(v, str) and v in subgraphs}
    return models[0]


def _model(blocks, txt_path: str, bin_path: str, weights: "_Weights", subgraph: bool) -> Model:
    header, layer_blocks = blocks[0], blocks[1:]
    if "layer_name" in header or "layer_type" in header:
        raise RefrunError(f"{txt_path}:1: the graph file has no header (model_name, input_tensors, ...)")
    head = {k: _value(txt_path, ln, k, raw) for k, (raw, ln) in header.items() if k not in _NAME_KEYS}
    for key in ("input_tensors", "output_tensors"):
        if key not in header:
            raise RefrunError(f"{txt_path}: the header lacks '{key}'")
        head[key] = _names(txt_path, header[key][1], key, header[key][0])
    layers = [_layer(block, txt_path, weights) for block in layer_blocks]
    if "layer_number" in head and head["layer_number"] != len(layers):
        raise RefrunError(f"{txt_path}:{header['layer_number'][1]}: layer_number={head['layer_number']} "
                          f"but the file has {len(layers)} layer blocks (truncated?)")
    name = head.get("subgraph_name" if subgraph else "model_name", "model")
    model = Model(str(name), txt_path, bin_path, head["input_tensors"], head["output_tensors"], layers, head, subgraph)
    _check_links(model)
    return model


def _blocks(text: str, path: str) -> List[Dict[str, Tuple[str, int]]]:
    blocks, current = [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            current = None
            continue
        if stripped.startswith("#"):
            continue
        key, sep, raw = stripped.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise RefrunError(f"{path}:{lineno}: bad line '{stripped}' (expected key=value)")
        if current is None:
            current = {}
            blocks.append(current)
        if key in current:
            raise RefrunError(f"{path}:{lineno}: key '{key}' repeated in one block")
        current[key] = (raw.strip(), lineno)
    return blocks


def _value(path: str, line: int, key: str, raw: str, layer: str = None):
    try:
        return parse_value(raw)
    except ValueSyntax as e:
        who = f"layer '{layer}': " if layer else ""
        raise RefrunError(f"{path}:{line}: {who}cannot parse {key}={raw}: {e}") from None


def _names(path: str, line: int, key: str, raw: str, layer: str = None) -> List[str]:
    try:
        return parse_names(raw)
    except ValueSyntax as e:
        who = f"layer '{layer}': " if layer else ""
        raise RefrunError(f"{path}:{line}: {who}cannot parse {key}={raw}: {e}") from None


def _dtype(name, path: str, line: int, layer: str, key: str) -> DType:
    if name not in DTYPES:
        raise RefrunError(f"{path}:{line}: layer '{layer}': {key}: unknown dtype '{name}'")
    return DTYPES[name]


def _shape(value, path, line, layer, key) -> Tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise RefrunError(f"{path}:{line}: layer '{layer}': {key}: {value} is not a shape")
    return tuple(value)


def _layer(block, path: str, weights: "_Weights") -> Layer:
    first = min(ln for _, ln in block.values())
    if "layer_name" not in block:
        raise RefrunError(f"{path}:{first}: layer block lacks 'layer_name'")
    name = block["layer_name"][0]
    lines = {k: ln for k, (_, ln) in block.items()}
    values = {k: (_names if k in _NAME_KEYS else _value)(path, ln, k, raw, name) for k, (raw, ln) in block.items()}

    def need(key):
        if key not in values:
            raise RefrunError(f"{path}:{first}: layer '{name}': missing key '{key}'")
        return values[key]

    def parallel(key, n):
        value = need(key)
        if not isinstance(value, list) or len(value) != n:
            got = len(value) if isinstance(value, list) else "no list"
            raise RefrunError(f"{path}:{lines[key]}: layer '{name}': '{key}' has {got} entries for {n} tensors")
        return value

    ltype = str(need("layer_type"))
    bottoms, tops = need("layer_bottom"), need("layer_top")
    shapes = [_shape(s, path, lines["layer_top_shape"], name, "layer_top_shape")
              for s in parallel("layer_top_shape", len(tops))]
    types = [_dtype(t, path, lines["layer_top_type"], name, "layer_top_type")
             for t in parallel("layer_top_type", len(tops))]
    for key in ("layer_bottom_shape", "layer_bottom_type"):
        if key in values:
            parallel(key, len(bottoms))
    scales = parallel("layer_top_scale", len(tops)) if "layer_top_scale" in values else None
    zps = parallel("layer_top_zp", len(tops)) if "layer_top_zp" in values else None
    ranges = parallel("layer_top_range", len(tops)) if "layer_top_range" in values else None
    for r in ranges or []:
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            for v in r)):
            raise RefrunError(f"{path}:{lines['layer_top_range']}: layer '{name}': layer_top_range entry {r} "
                              f"is not a [min, max] pair of numbers")
    layer = Layer(name, ltype, path, first, lines, bottoms, tops, shapes, types, scales, zps, ranges)

    const_names = [k[: -len("_offset")] for k in block
                   if k.endswith("_offset") and k[: -len("_offset")] + "_size" in block]
    const_keys = {c + s for c in const_names for s in _CONST_SUFFIXES}
    for cname in const_names:
        missing = [cname + s for s in _CONST_SUFFIXES if cname + s not in block]
        if missing:
            raise RefrunError(f"{path}:{lines[cname + '_offset']}: layer '{name}': constant '{cname}' "
                              f"lacks {', '.join(missing)}")
        ctype = _dtype(values[cname + "_type"], path, lines[cname + "_type"], name, cname + "_type")
        cshape = _shape(values[cname + "_shape"], path, lines[cname + "_shape"], name, cname + "_shape")
        layer.consts[cname] = weights.read(layer, cname, ctype, cshape, values[cname + "_offset"],
                                           values[cname + "_size"])
        layer.const_types[cname] = ctype
    layer.params = {k: v for k, v in values.items() if k not in _LAYER_KEYS and k not in const_keys}
    return layer


class _Weights:
    """The .bin as one byte array, opened only when a constant is read."""

    def __init__(self, path: str):
        self.path = path
        self.data = None

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.data = None

    def read(self, layer: Layer, cname: str, dtype: DType, shape, offset, size) -> np.ndarray:
        line = layer.lines[cname + "_offset"]
        where = f"{layer.path}:{line}: layer '{layer.name}': constant '{cname}'"
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, size)):
            raise RefrunError(f"{where}: offset and size must be non-negative integers ({offset}, {size})")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        itemsize = np.dtype(dtype.storage).itemsize
        if count * itemsize != size:
            raise RefrunError(f"{where}: size {size} bytes does not match shape {list(shape)} of "
                              f"{dtype.name} ({count * itemsize} bytes)")
        if self.data is None:
            if not os.path.isfile(self.path):
                raise RefrunError(f"{where}: weights file '{self.path}' not found")
            self.data = np.fromfile(self.path, dtype=np.uint8)
        if offset + size > self.data.size:
            raise RefrunError(f"{where}: bytes {offset}..{offset + size} lie past the end of "
                              f"'{self.path}' ({self.data.size} bytes)")
        raw = self.data[offset: offset + size].view(dtype.storage).reshape(shape)
        if dtype.name == "bfloat16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        if dtype.minifloat:
            return decode_minifloat(raw, dtype.name)
        if not (dtype.is_int or dtype.name == "bool"):
            return raw.astype(np.float64 if dtype.bits == 64 else np.float32)
        value = raw.astype(np.int64)
        if dtype.is_int and dtype.bits < 8 * itemsize and \
                (value.min(initial=0) < dtype.qmin or value.max(initial=0) > dtype.qmax):
            raise RefrunError(f"{where}: values outside the {dtype.name} range [{dtype.qmin}, {dtype.qmax}]")
        return value


def _check_links(model: Model) -> None:
    """Every tensor written once; every read tensor, input and output written somewhere."""
    writers: Dict[str, Layer] = {}
    for layer in model.layers:
        for t in layer.tops:
            if t in writers:
                raise layer.error(f"tensor '{t}' is also written by layer '{writers[t].name}'", "layer_top")
            writers[t] = layer
    names = set()
    for layer in model.layers:
        if layer.name in names:
            raise layer.error("a second layer has this name", "layer_name")
        names.add(layer.name)
        for b in layer.bottoms:
            if b not in writers:
                raise layer.error(f"reads tensor '{b}' that no layer writes", "layer_bottom")
    for t in model.inputs + model.outputs:
        if t not in writers:
            raise RefrunError(f"{model.path}: graph input/output tensor '{t}' is written by no layer")
