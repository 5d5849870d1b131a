"""Write a PyGraph as a graph file (.txt) and a weights file (.bin).

Both files are written under temporary names and renamed at the end, so a
failure never leaves a half-written IR behind.
"""
import os
from typing import List

from ..dtype import tensor_to_bytes
from ..errors import IRError
from ..graph import PyGraph
from ..node import PyNode
from ..tensor import PyTensor
from .values import format_value


def write_graph(graph: PyGraph, txt_path: str, bin_path: str = None) -> None:
    if bin_path is None:
        bin_path = os.path.splitext(txt_path)[0] + ".bin"
    out_dir = os.path.dirname(os.path.abspath(txt_path))
    os.makedirs(out_dir, exist_ok=True)
    tmp_txt, tmp_bin = txt_path + ".tmp", bin_path + ".tmp"
    try:
        with open(tmp_bin, "wb") as fbin:
            blocks = [_header(graph)]
            for index, node in enumerate(graph.nodes):
                blocks.append(_layer_block(node, index, fbin))
        with open(tmp_txt, "w", encoding="utf-8") as ftxt:
            ftxt.write("\n\n".join("\n".join(lines) for lines in blocks) + "\n")
        os.replace(tmp_bin, bin_path)
        os.replace(tmp_txt, txt_path)
    except OSError as e:
        raise IRError(f"cannot write IR '{txt_path}': {e}") from None
    finally:
        for tmp in (tmp_txt, tmp_bin):
            if os.path.exists(tmp):
                os.remove(tmp)


def _kv(key, value) -> str:
    return f"{key}={format_value(value)}"


def _names(tensors: List[PyTensor]) -> str:
    return "[" + ",".join(t.name for t in tensors) + "]"


def _header(graph: PyGraph) -> List[str]:
    lines = [
        _kv("model_name", graph.name),
        _kv("layer_number", len(graph.nodes)),
        "input_tensors=" + _names(graph.input_tensors),
        "output_tensors=" + _names(graph.output_tensors),
    ]
    lines += [_kv(k, v) for k, v in graph.header.items()]
    return lines


def _layer_block(node: PyNode, index: int, fbin) -> List[str]:
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
    quant_keys = list(node.attrs.get("ir_top_quant_keys", []))
    if any(t.is_quantized for t in node.outputs):
        quant_keys = ["layer_top_scale", "layer_top_zp"] + (
            ["layer_top_range"] if any(t.ir_range is not None for t in node.outputs) else [])
    for key in quant_keys:
        lines.append(_kv(key, [_top_quant_value(t, key) for t in node.outputs]))
    for cname, c in node.constants.items():
        offset = fbin.tell()
        data = tensor_to_bytes(c.betensor, c.dtype)
        fbin.write(data)
        lines += [
            _kv(cname + "_type", c.dtype.value),
            _kv(cname + "_offset", offset),
            _kv(cname + "_size", len(data)),
            _kv(cname + "_shape", list(c.ir_shape)),
        ]
    lines += [_kv(k, v) for k, v in node.params.items()]
    return lines


def _top_quant_value(t: PyTensor, key: str):
    if key == "layer_top_scale":
        return float(t.scale)
    if key == "layer_top_zp":
        return int(t.zerop)
    return t.ir_range if t.ir_range is not None else [float("nan"), float("nan")]
