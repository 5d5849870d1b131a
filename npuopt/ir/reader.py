"""Read a graph file (.txt) and its weights file (.bin) into a PyGraph."""
import math
import os
from collections import OrderedDict
from typing import List, Optional, Tuple

from ..dtype import Dtype
from ..errors import GraphError, IRError
from ..graph import PyGraph, QuantizeGraph
from ..node import PyNode
from ..quant import fields
from ..tensor import PyTensor
from .bin_file import WeightsFile
from .compat import take_source_quantization
from .sections import SUBGRAPH_KEY, link_subgraphs, split_sections
from .values import ValueSyntaxError, parse_name_list, parse_value

HEADER_KEYS = ("model_name", "layer_number", "input_tensors", "output_tensors")
TOP_QUANT_KEYS = ("layer_top_scale", "layer_top_zp", "layer_top_range")
CONSTANT_SUFFIXES = ("_type", "_offset", "_size", "_shape")
MAX_ELEMENTS_LOG2 = 31  # per tensor: 8 GiB of float32; an IR asking for more is broken, not just big
CHECKED_CONSTANTS = ("weights", "biases")  # no NaN/Inf in these (a Constant layer's values may hold Inf)
STRUCTURE_KEYS = ("layer_id", "layer_name", "layer_type", "layer_bottom", "layer_top",
                  "layer_bottom_shape", "layer_bottom_type", "layer_top_shape", "layer_top_type")


def read_graph(txt_path: str, bin_path: Optional[str] = None, graph_cls=QuantizeGraph) -> PyGraph:
    """Load an IR and the subgraph sections its control-flow layers run (ir/sections.py). `bin_path`
    defaults to the .txt's name with .bin; it may be absent when the graph has no constants."""
    if bin_path is None:
        bin_path = os.path.splitext(txt_path)[0] + ".bin"
    (header, layer_blocks), *sections = split_sections(_split_blocks(_read_lines(txt_path), txt_path), txt_path)
    weights = WeightsFile(bin_path, txt_path)
    try:
        model_name = header["model_name"][0] if "model_name" in header else "model"
        graph = _read_section(graph_cls(model_name), header, layer_blocks, weights, txt_path, txt_path)
        subgraphs = OrderedDict()
        for sub_header, blocks in sections:
            name = sub_header[SUBGRAPH_KEY][0]
            subgraphs[name] = _read_section(graph_cls(name), sub_header, blocks, weights, txt_path,
                                            f"{txt_path}: subgraph '{name}'")
        link_subgraphs(graph, subgraphs, txt_path)
        take_source_quantization(graph)  # a pre-quantized model's IR (compat_quantized_model=true): its grids kept
        if _is_quantized_ir(header, graph):
            for node in [n for g in [graph, *subgraphs.values()] for n in g.nodes]:
                _deduce_quantized(node)
    finally:
        weights.close()
    return graph


def _read_section(graph: PyGraph, header, layer_blocks, weights: WeightsFile, path: str, where: str) -> PyGraph:
    """One section's layers into `graph`, its header keys (but the ones it owns) kept."""
    _check_layer_number(header, len(layer_blocks), path)
    for key, (raw, line) in header.items():
        if key not in HEADER_KEYS and key != SUBGRAPH_KEY:
            graph.header[key] = _parse(raw, path, line)
    nodes = [_build_node(block, weights, path) for block in layer_blocks]
    graph.set_layers(nodes, _names(header, "input_tensors", path), _names(header, "output_tensors", path),
                     where=where)
    _check_bottoms(graph, layer_blocks, path)
    return graph


def _read_lines(path: str) -> List[str]:
    """The graph file's lines; a file that is not UTF-8 text is an IRError naming the line."""
    if os.path.isdir(path):
        raise IRError(f"graph file '{path}' is a folder, not a file")
    if not os.path.isfile(path):
        raise IRError(f"graph file '{path}' not found")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise IRError(f"cannot read graph file '{path}': {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise IRError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                      f"is this the graph file (.txt) of the IR?") from None


def _split_blocks(lines: List[str], path: str) -> List["OrderedDict"]:
    """The file's blocks of key=value lines (separated by empty lines), each key once."""
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
    return blocks


def _parse(raw: str, path: str, line: int):
    try:
        return parse_value(raw)
    except ValueSyntaxError as e:
        shown = raw if len(raw) <= 80 else raw[:60] + f"... ({len(raw)} characters)"
        raise IRError(f"{path}:{line}: cannot parse value '{shown}': {e}") from None


def _value(block, key: str, path: str):
    """The parsed value of `key` and `path:line` of its line, for messages."""
    raw, line = block[key]
    return _parse(raw, path, line), f"{path}:{line}"


def _check_layer_number(header, count: int, path: str) -> None:
    """A layer_number that disagrees with the blocks found means a truncated or spliced file."""
    if "layer_number" not in header:
        return
    number, at = _value(header, "layer_number", path)
    if not isinstance(number, int) or isinstance(number, bool):
        raise IRError(f"{at}: layer_number '{header['layer_number'][0]}' is not an integer")
    if number != count:
        raise IRError(f"{at}: layer_number={number} but the file has {count} layer blocks")


def _names(block, key, path, layer=None) -> List[str]:
    where = f"{path}: layer '{layer}'" if layer else path
    if key not in block:
        raise IRError(f"{where}: missing '{key}'")
    raw, line = block[key]
    try:
        return parse_name_list(raw)
    except ValueSyntaxError as e:
        raise IRError(f"{path}:{line}: cannot parse '{key}': {e}") from None


def _build_node(block, weights: WeightsFile, path: str) -> PyNode:
    if "layer_name" not in block:
        raise IRError(f"{path}:{next(iter(block.values()))[1]}: layer block lacks 'layer_name'")
    name, name_line = block["layer_name"]
    if not name:
        raise IRError(f"{path}:{name_line}: empty layer_name")
    where = f"{path}: layer '{name}'"
    if "layer_type" not in block:
        raise IRError(f"{where}: missing 'layer_type'")
    if not block["layer_type"][0]:
        raise IRError(f"{path}:{block['layer_type'][1]}: layer '{name}': empty layer_type")
    layer_id = None
    if "layer_id" in block:
        layer_id, at = _value(block, "layer_id", path)
        if not isinstance(layer_id, int) or isinstance(layer_id, bool):
            raise IRError(f"{at}: layer '{name}': layer_id '{block['layer_id'][0]}' is not an integer")
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
        dtype = _dtype(tname_type, _at(block, "layer_top_type", path, name), "layer_top_type")
        ir_shape = _tensor_shape(shape, _at(block, "layer_top_shape", path, name))
        node.outputs.append(PyTensor(tname, dtype=dtype, ir_shape=ir_shape))
    _read_top_quantization(node, block, len(tops), path)

    constant_names = _constant_names(block, where)
    for key, (raw, line) in block.items():
        if key in STRUCTURE_KEYS or key in TOP_QUANT_KEYS:
            continue
        cname = _constant_of(key, constant_names)
        if cname is not None:
            if cname not in node.constants:
                node.constants[cname] = _read_constant(weights, cname, block, path, name)
                if cname in CHECKED_CONSTANTS and node.type != "Constant":
                    weights.check_finite(node.constants[cname], name)
            continue
        node.params[key] = _parse(raw, path, line)
    return node


def _at(block, key, path, layer) -> str:
    return f"{path}:{block[key][1]}: layer '{layer}'"


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
    if not isinstance(value, list) or not all(_is_int(d) and d >= 0 for d in value):
        raise IRError(f"{where}: {key}: '{value}' is not a shape (a list of non-negative ints)")
    return tuple(value)


def _tensor_shape(value, where) -> Tuple[int, ...]:
    """A layer_top_shape: a shape holding at least one and at most 2^MAX_ELEMENTS_LOG2 elements."""
    shape = _shape(value, where, "layer_top_shape")
    count = math.prod(shape)
    if not 0 < count <= 1 << MAX_ELEMENTS_LOG2:
        size = "no element (an axis of size 0)" if count == 0 else \
            f"{count} elements, more than 2^{MAX_ELEMENTS_LOG2}"
        raise IRError(f"{where}: layer_top_shape {list(shape)} holds {size}")
    return shape


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, float)


def _read_top_quantization(node: PyNode, block, n_tops: int, path: str) -> None:
    present = [k for k in TOP_QUANT_KEYS if k in block]
    values = {k: _list_param(block, k, n_tops, path, node.name) for k in present}
    valid = {"layer_top_scale": (_is_number, "a number"), "layer_top_zp": (_is_int, "an integer"),
             "layer_top_range": (lambda r: isinstance(r, list) and len(r) == 2 and all(map(_is_number, r)),
                                 "a [min,max] pair of numbers")}
    for key, entries in values.items():
        check, expected = valid[key]
        for entry in entries:
            if not check(entry):
                raise IRError(f"{_at(block, key, path, node.name)}: '{key}' entry '{entry}' is not {expected}")
    node.attrs["ir_top_fields"] = values  # written back as they were when the IR stays float
    fields.read_top_fields(node, values)


def _is_quantized_ir(header, graph) -> bool:
    """A quantized IR (npuopt's or the tool chain's; not the parser's, with a compat_quantized_model key) states
    its tops' integer or fp8 quantization, or its weights' (weight-only quantization: weights_scale)."""
    return "compat_quantized_model" not in header and any(
        any(t.dtype.is_quantized for t in n.outputs) and "layer_top_scale" in n.attrs.get("ir_top_fields", {})
        or "weights_scale" in n.constants or "weights_scale" in n.params for n in graph.nodes)


def _deduce_quantized(node: PyNode) -> None:
    """Whether a layer of a quantized IR computes quantized, as the tool chain decides: Quantize
    and fp8 layers do; `unquantifiable=true` layers do not; others do unless a float tensor (16
    bits or more) enters or leaves them or is one of their constants (a lookup table aside)."""
    if node.type == "Quantize":
        node.quantized = True
    elif node.params.get("unquantifiable", False) is True:
        node.quantized = False
    else:
        dtypes = [t.dtype for t in list(node.inputs) + list(node.outputs)]
        fp8 = any(d.is_minifloat for d in dtypes)  # an fp8 layer: its float32 biases and scales do not count
        if not fp8 and not any("lut" in k for k in node.constants):
            dtypes += [c.dtype for k, c in node.constants.items() if k not in ("weights_scale", "biases_scale")]
        node.quantized = fp8 or not any(d.is_float and d.bits >= 16 for d in dtypes)
    if node.quantized or "weights_scale" in node.constants or "weights_scale" in node.params:
        fields.read_constant_quant_fields(node)  # a float layer's integer weights too (weight-only)


def _constant_names(block, where) -> List[str]:
    """Constants are the bases of NAME_offset keys; three of the four keys without
    the fourth is a broken constant, not three parameters."""
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
        elif key.endswith("_size"):
            base = key[: -len("_size")]
            if base + "_offset" not in block and base + "_type" in block and base + "_shape" in block:
                raise IRError(f"{where}: constant '{base}' lacks {base}_offset")
    return names


def _constant_of(key: str, constant_names: List[str]) -> Optional[str]:
    for suffix in CONSTANT_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in constant_names:
            return key[: -len(suffix)]
    return None


def _read_constant(weights: WeightsFile, cname, block, path, layer) -> PyTensor:
    """Constant `cname` of a layer block, its place in the .bin checked against its type and shape."""
    offset, offset_at = _value(block, cname + "_offset", path)
    size, size_at = _value(block, cname + "_size", path)
    for key, value, at in ((cname + "_offset", offset, offset_at), (cname + "_size", size, size_at)):
        if not _is_int(value) or value < 0:
            raise IRError(f"{at}: layer '{layer}': {key} '{block[key][0]}' is not a non-negative integer")
    dtype = _dtype(block[cname + "_type"][0], _at(block, cname + "_type", path, layer), cname + "_type")
    shape_value, shape_at = _value(block, cname + "_shape", path)
    shape = _shape(shape_value, f"{shape_at}: layer '{layer}'", cname + "_shape")
    count = math.prod(shape)  # exact for any size, unlike np.prod's int64
    if count * dtype.storage_bytes != size:
        raise IRError(f"{size_at}: layer '{layer}': constant '{cname}': size {size} bytes disagrees with "
                      f"shape {list(shape)} of {dtype.value} ({count * dtype.storage_bytes} bytes)")
    if weights.size is None:
        raise IRError(f"weights file '{weights.path}' not found (needed by layer '{layer}' of '{path}')")
    if offset + size > weights.size:
        raise IRError(f"{offset_at}: layer '{layer}': constant '{cname}': offset {offset} + size {size} "
                      f"passes the end of '{weights.path}' ({weights.size} bytes)")
    return PyTensor(cname, weights.tensor(offset, size, dtype, shape), dtype, shape)


def _check_bottoms(graph: PyGraph, blocks, path: str) -> None:
    """layer_bottom_shape/_type, where given, must be valid and agree with the producers'."""
    by_name = {b["layer_name"][0]: b for b in blocks}
    for node in graph.nodes:
        block = by_name[node.name]
        for key in ("layer_bottom_shape", "layer_bottom_type"):
            if key not in block:
                continue
            entries = _list_param(block, key, len(node.inputs), path, node.name)
            at = _at(block, key, path, node.name)
            for t, entry in zip(node.inputs, entries):
                if key == "layer_bottom_shape":
                    declared, actual = list(_shape(entry, at, key)), list(t.ir_shape)
                else:
                    declared, actual = _dtype(entry, at, key).value, t.dtype.value
                if declared != actual:
                    raise GraphError(f"{at}: {key} {declared} for tensor '{t.name}' disagrees with its "
                                     f"producer's layer_top_{key.rsplit('_', 1)[1]} {actual}")
