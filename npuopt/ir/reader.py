"""Read a graph file (.txt) and its weights file (.bin) into a PyGraph."""
import os
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..dtype import Dtype, bytes_to_tensor
from ..errors import GraphError, IRError
from ..graph import PyGraph, QuantizeGraph
from ..node import PyNode
from ..tensor import PyTensor
from .values import ValueSyntaxError, parse_name_list, parse_value

HEADER_KEYS = ("model_name", "layer_number", "input_tensors", "output_tensors")
TOP_QUANT_KEYS = ("layer_top_scale", "layer_top_zp", "layer_top_range")
CONSTANT_SUFFIXES = ("_type", "_offset", "_size", "_shape")

Block = "OrderedDict[str, Tuple[str, int]]"  # key -> (raw value, line number)


def read_graph(txt_path: str, bin_path: Optional[str] = None, graph_cls=QuantizeGraph) -> PyGraph:
    """Load an IR. `bin_path` defaults to the .txt's name with .bin; it may be
    absent when the graph has no constants."""
    if not os.path.isfile(txt_path):
        raise IRError(f"graph file '{txt_path}' not found")
    if bin_path is None:
        bin_path = os.path.splitext(txt_path)[0] + ".bin"
    with open(txt_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    header, layer_blocks = _split_blocks(lines, txt_path)
    weights = _Weights(bin_path, txt_path)
    try:
        graph = graph_cls(str(_header_value(header, "model_name", txt_path, default="model")))
        for key, (raw, line) in header.items():
            if key not in HEADER_KEYS:
                graph.header[key] = _parse(raw, txt_path, line)
        nodes = [_build_node(block, weights, txt_path) for block in layer_blocks]
        inputs = _names(header, "input_tensors", txt_path)
        outputs = _names(header, "output_tensors", txt_path)
        graph.set_layers(nodes, inputs, outputs, where=txt_path)
        _check_bottom_shapes(graph, layer_blocks, txt_path)
    finally:
        weights.close()
    return graph


def _split_blocks(lines: List[str], path: str):
    blocks: List["OrderedDict"] = []
    current = None
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            current = None
            continue
        if stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            raise IRError(f"{path}:{lineno}: cannot parse line '{stripped}' (expected key=value)")
        if current is None:
            current = OrderedDict()
            blocks.append(current)
        if key in current:
            raise IRError(f"{path}:{lineno}: key '{key}' appears twice in one block")
        current[key] = (value.strip(), lineno)
    if not blocks:
        raise IRError(f"{path}: the graph file is empty")
    header = OrderedDict()
    layers = []
    for block in blocks:
        if "layer_type" in block or "layer_name" in block or "layer_id" in block:
            layers.append(block)
        elif layers:
            first_line = next(iter(block.values()))[1]
            raise IRError(f"{path}:{first_line}: block has no layer_name/layer_type")
        else:
            header.update(block)
    return header, layers


def _parse(raw: str, path: str, line: int):
    try:
        return parse_value(raw)
    except ValueSyntaxError as e:
        raise IRError(f"{path}:{line}: cannot parse value '{raw}': {e}") from None


def _header_value(header, key, path, default=None):
    if key not in header:
        if default is not None:
            return default
        raise IRError(f"{path}: header lacks '{key}'")
    raw, line = header[key]
    return _parse(raw, path, line)


def _names(block, key, path, layer=None) -> List[str]:
    where = f"{path}: layer '{layer}'" if layer else path
    if key not in block:
        raise IRError(f"{where}: missing '{key}'")
    raw, line = block[key]
    try:
        return parse_name_list(raw)
    except ValueSyntaxError as e:
        raise IRError(f"{path}:{line}: cannot parse '{key}': {e}") from None


def _build_node(block, weights: "_Weights", path: str) -> PyNode:
    if "layer_name" not in block:
        raise IRError(f"{path}:{next(iter(block.values()))[1]}: layer block lacks 'layer_name'")
    name = block["layer_name"][0]
    where = f"{path}: layer '{name}'"
    if "layer_type" not in block:
        raise IRError(f"{where}: missing 'layer_type'")
    layer_id = _parse(*block["layer_id"], path) if "layer_id" in block else None
    node = PyNode(name, block["layer_type"][0], layer_id)

    bottoms = _names(block, "layer_bottom", path, name)
    tops = _names(block, "layer_top", path, name)
    top_shapes = _list_param(block, "layer_top_shape", len(tops), path, name)
    top_types = _list_param(block, "layer_top_type", len(tops), path, name)
    for key in ("layer_bottom_shape", "layer_bottom_type"):
        if key in block:
            _list_param(block, key, len(bottoms), path, name)
    node.inputs = [PyTensor(b) for b in bottoms]
    for tname, shape, tname_type in zip(tops, top_shapes, top_types):
        dtype = _dtype(tname_type, where, "layer_top_type")
        node.outputs.append(PyTensor(tname, dtype=dtype, ir_shape=_shape(shape, where, "layer_top_shape")))
    _read_top_quantization(node, block, len(tops), path)

    constant_names = _constant_names(block, where)
    for key, (raw, line) in block.items():
        if key in ("layer_id", "layer_name", "layer_type", "layer_bottom", "layer_top",
                   "layer_bottom_shape", "layer_bottom_type", "layer_top_shape", "layer_top_type") \
                or key in TOP_QUANT_KEYS:
            continue
        cname = _constant_of(key, constant_names)
        if cname is not None:
            if cname not in node.constants:
                node.constants[cname] = weights.read(cname, block, path, name)
            continue
        node.params[key] = _parse(raw, path, line)
    return node


def _list_param(block, key, expected_len, path, layer):
    if key not in block:
        raise IRError(f"{path}: layer '{layer}': missing '{key}'")
    raw, line = block[key]
    value = _parse(raw, path, line)
    if not isinstance(value, list):
        raise IRError(f"{path}:{line}: layer '{layer}': '{key}' must be a list")
    if len(value) != expected_len:
        which = key.rsplit("_", 1)[0]
        raise IRError(f"{path}:{line}: layer '{layer}': '{key}' has {len(value)} entries but "
                      f"'{which}' has {expected_len}")
    return value


def _dtype(name, where, key) -> Dtype:
    try:
        return Dtype.from_name(name)
    except IRError as e:
        raise IRError(f"{where}: {key}: {e}") from None


def _shape(value, where, key) -> Tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and d >= 0 for d in value):
        raise IRError(f"{where}: {key}: '{value}' is not a shape (a list of non-negative ints)")
    return tuple(value)


def _read_top_quantization(node: PyNode, block, n_tops: int, path: str) -> None:
    present = [k for k in TOP_QUANT_KEYS if k in block]
    node.attrs["ir_top_quant_keys"] = present
    values = {k: _list_param(block, k, n_tops, path, node.name) for k in present}
    for i, t in enumerate(node.outputs):
        if "layer_top_scale" in values:
            t.scale = values["layer_top_scale"][i]
        if "layer_top_zp" in values:
            t.zerop = values["layer_top_zp"][i]
        if "layer_top_range" in values:
            t.ir_range = values["layer_top_range"][i]
        if t.dtype.is_integer and "layer_top_scale" in values:
            t.qbits, t.qmin, t.qmax = t.dtype.bits, t.dtype.qmin, t.dtype.qmax


def _constant_names(block, where) -> List[str]:
    names = []
    for key in block:
        if key.endswith("_offset"):
            base = key[: -len("_offset")]
            present = [base + s in block for s in CONSTANT_SUFFIXES]
            if all(present):
                names.append(base)
            elif base + "_size" in block:
                missing = [base + s for s, p in zip(CONSTANT_SUFFIXES, present) if not p]
                raise IRError(f"{where}: constant '{base}' lacks {', '.join(missing)}")
    return names


def _constant_of(key: str, constant_names: List[str]) -> Optional[str]:
    for suffix in CONSTANT_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in constant_names:
            return key[: -len(suffix)]
    return None


class _Weights:
    """The .bin, mapped once; constants are sliced out of the mapping."""

    def __init__(self, bin_path: str, txt_path: str):
        self.path = bin_path
        self.txt_path = txt_path
        self._map = None
        self.size = None
        if os.path.isfile(bin_path):
            self.size = os.path.getsize(bin_path)
            if self.size:
                self._map = np.memmap(bin_path, dtype=np.uint8, mode="r")

    def read(self, cname, block, path, layer) -> PyTensor:
        where = f"{path}: layer '{layer}': constant '{cname}'"
        dtype = _dtype(block[cname + "_type"][0], f"{path}: layer '{layer}'", cname + "_type")
        offset = _parse(*block[cname + "_offset"], path)
        size = _parse(*block[cname + "_size"], path)
        shape = _shape(_parse(*block[cname + "_shape"], path), f"{path}: layer '{layer}'", cname + "_shape")
        if not isinstance(offset, int) or offset < 0 or not isinstance(size, int) or size < 0:
            raise IRError(f"{where}: offset and size must be non-negative ints (got {offset}, {size})")
        count = int(np.prod(shape)) if shape else 1
        if count * dtype.storage_bytes != size:
            raise IRError(f"{where}: size {size} bytes disagrees with shape {list(shape)} of {dtype.value} "
                          f"({count * dtype.storage_bytes} bytes)")
        if self.size is None:
            raise IRError(f"weights file '{self.path}' not found (needed by layer '{layer}')")
        if offset + size > self.size:
            raise IRError(f"{where}: offset {offset} + size {size} passes the end of '{self.path}' "
                          f"({self.size} bytes)")
        raw = self._map[offset: offset + size] if size else np.zeros(0, np.uint8)
        return PyTensor(cname, bytes_to_tensor(raw, dtype, shape), dtype, shape)

    def close(self):
        self._map = None


def _check_bottom_shapes(graph: PyGraph, blocks, path: str) -> None:
    by_name = {b["layer_name"][0]: b for b in blocks}
    for node in graph.nodes:
        block = by_name[node.name]
        if "layer_bottom_shape" not in block:
            continue
        shapes = _parse(*block["layer_bottom_shape"], path)
        for t, shape in zip(node.inputs, shapes):
            if tuple(shape) != tuple(t.ir_shape):
                raise GraphError(f"{path}: layer '{node.name}': layer_bottom_shape {shape} for tensor "
                                 f"'{t.name}' disagrees with its producer's layer_top_shape {list(t.ir_shape)}")
