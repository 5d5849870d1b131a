"""Write a PyGraph as a graph file (.txt) and a weights file (.bin).

Both files are written under temporary names unique to the call and renamed at
the end, so a failure never leaves a half-written IR behind.
"""
import os
from typing import List

from ..dtype import tensor_to_bytes
from ..errors import IRError
from ..graph import PyGraph
from ..node import PyNode
from ..outputs import temp_path
from ..quant import fields
from ..tensor import PyTensor
from .values import format_value

# header keys of the parser's float IRs that say the model is float (compat_quantized_model=false,
# precision=float32): not written into a quantized IR
FLOAT_HEADER_KEYS = ("compat_quantized_model", "precision")


def write_graph(graph: PyGraph, txt_path: str, bin_path: str = None, bin_name: str = None) -> None:
    """The IR's .txt and .bin, each written whole or not at all; `bin_name`: the weights
    file's name as the header's model_bin gives it, where bin_path is a staging name."""
    if bin_path is None:
        bin_path = os.path.splitext(txt_path)[0] + ".bin"
    out_dir = os.path.dirname(os.path.abspath(txt_path))
    os.makedirs(out_dir, exist_ok=True)
    tmp_txt, tmp_bin = temp_path(txt_path), temp_path(bin_path)
    try:
        with open(tmp_bin, "wb") as f:
            fbin, quantized = _Bin(f), graph.quantized
            sections = [[_header(graph, bin_name or os.path.basename(bin_path))] +
                        [_layer_block(node, index, fbin, quantized) for index, node in enumerate(graph.nodes)]]
            for sg in graph.subgraph_map.values():  # the subgraphs its control-flow layers run
                sections.append([_subgraph_header(sg, quantized)] +
                                [_layer_block(node, index, fbin, quantized) for index, node in enumerate(sg.nodes)])
        with open(tmp_txt, "w", encoding="utf-8") as ftxt:
            # as the tool chain writes them: one empty line between blocks, two before a subgraph section
            ftxt.write("\n\n\n".join("\n\n".join("\n".join(lines) for lines in blocks) for blocks in sections) + "\n")
        os.replace(tmp_bin, bin_path)
        os.replace(tmp_txt, txt_path)
    except OSError as e:
        raise IRError(f"cannot write IR '{txt_path}': {e}") from None
    finally:
        for tmp in (tmp_txt, tmp_bin):
            if os.path.exists(tmp):
                os.remove(tmp)


class _Bin:
    """The weights file being written. A constant that holds the very tensor of one written
    before (tied weights: a decoder's embedding and its head) points at its bytes instead
    of writing them again, as the tool chain's reader allows (each constant is read by its
    offset and size); the reader shares them again (bin_file.WeightsFile)."""

    def __init__(self, f):
        self.f = f
        self.written = {}  # (storage, view, dtype) -> (offset, size, the tensor: kept so its storage is not reused)

    def write(self, value, dtype, shared: bool) -> tuple:
        """(offset, size) of `value` as `dtype`; `shared`: a layer's own constant, which the
        graph keeps alive (not a quantization constant made for the write)."""
        key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), tuple(value.stride()),
               value.dtype, dtype) if shared and value.numel() else None
        if key in self.written:
            return self.written[key][:2]
        offset = self.f.tell()
        data = tensor_to_bytes(value, dtype)
        self.f.write(data)
        if key is not None:
            self.written[key] = (offset, len(data), value)
        return offset, len(data)


def _kv(key, value) -> str:
    return f"{key}={format_value(value)}"


def _names(tensors: List[PyTensor]) -> str:
    return "[" + ",".join(t.name for t in tensors) + "]"


def _header(graph: PyGraph, bin_name: str) -> List[str]:
    """The four keys, then the other header keys the IR was read with, in their order
    (the IR is shared with other tools: what npuopt does not know it keeps); a quantized
    IR drops those that say the model is float, which would make the tool chain read it
    as float (FLOAT_HEADER_KEYS), and `model_bin` names the weights file written beside
    it, not the one the IR was read with."""
    lines = [
        _kv("model_name", graph.name),
        _kv("layer_number", len(graph.nodes)),
        "input_tensors=" + _names(graph.input_tensors),
        "output_tensors=" + _names(graph.output_tensors),
    ]
    quantized = graph.quantized
    lines += [f"model_bin=./{bin_name}" if k == "model_bin" else _kv(k, v) for k, v in graph.header.items()
              if not (quantized and k in FLOAT_HEADER_KEYS)]
    return lines


def _subgraph_header(sg: PyGraph, quantized: bool) -> List[str]:
    """A subgraph section's header, as the tool chain writes it: its name and layer count,
    the header keys it was read with (but those that say the model is float, in a
    quantized IR), its input and output tensors."""
    lines = [_kv("subgraph_name", sg.name), _kv("layer_number", len(sg.nodes))]
    lines += [_kv(k, v) for k, v in sg.header.items() if not (quantized and k in FLOAT_HEADER_KEYS)]
    return lines + ["input_tensors=" + _names(sg.input_tensors), "output_tensors=" + _names(sg.output_tensors)]


def _layer_block(node: PyNode, index: int, fbin, quantized_graph: bool) -> List[str]:
    lines = [
        _kv("layer_id", index),
        _kv("layer_name", node.name),
        _kv("layer_type", node.type),
        "layer_bottom=" + _names(node.inputs),
        _kv("layer_bottom_shape", [list(t.ir_shape) for t in node.inputs]),
        _kv("layer_bottom_type", [t.dtype.value for t in node.inputs]),
        "layer_top=" + _names(node.outputs),
        _kv("layer_top_shape", [list(t.ir_shape) for t in node.outputs]),
        _kv("layer_top_type", [t.dtype.value for t in node.outputs]),
    ]
    tops = fields.top_fields(node) if quantized_graph else node.attrs.get("ir_top_fields", {})
    lines += [_kv(k, v) for k, v in tops.items()]
    quant_params, quant_constants = fields.constant_quant_fields(node) if quantized_graph else ({}, {})
    constants = [(cname, c.betensor, c.dtype) for cname, c in node.constants.items()]
    constants += [(cname, value, dtype) for cname, (value, dtype) in quant_constants.items()]
    for i, (cname, value, dtype) in enumerate(constants):
        offset, size = fbin.write(value, dtype, shared=i < len(node.constants))
        lines += [
            _kv(cname + "_type", dtype.value),
            _kv(cname + "_offset", offset),
            _kv(cname + "_size", size),
            _kv(cname + "_shape", list(value.shape)),
        ]
    lines += [_kv(k, v) for k, v in node.params.items()]
    lines += [_kv(k, v) for k, v in quant_params.items()]
    if quantized_graph and "activation_quantization_axis" not in node.params:
        lines.append(_kv("activation_quantization_axis", [t.key_axis for t in node.outputs]))
    return lines
