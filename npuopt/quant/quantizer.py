"""Pipeline pieces between the float graph and the quantized one: per-layer
settings (cfg + opt_config), calibration, the mixed-precision quantized graph,
the settings template, and float-vs-quantized comparisons."""
import copy
import difflib
import json
import math
import os
from collections import OrderedDict
from typing import Dict, Iterable, List, Set

import torch

from ..config import FIELDS, parse_field
from ..dtype import Dtype
from ..errors import ConfigError, QuantizeError
from ..logger import OPT_INFO, OPT_WARN
from ..node import PyNode
from ..registry import OP_QUANTIZERS, OpType
from ..tensor import PyTensor
from . import qmath
from .settings import QuantSettings
from .tensors import Unsupported
from .statistics import Statistics
from .strategies import check_strategy

TEMPLATE_IGNORED_KEYS = ("layer_type",)
BOUNDARY_TYPES = (OpType.Quantize, OpType.DeQuantize)
OUTPUT_STRATEGY = "extrema"  # for layers writing a graph output, unless opt_config says otherwise


# ---- settings -----------------------------------------------------------------
def layer_settings(cfg, graph, opt_config_path: str = "") -> Dict[str, QuantSettings]:
    """Effective settings of every layer: the cfg's fields, then the layer's entry in
    the JSON opt_config ({"layer_name": {"weight_bits": 4, ...}}), validated."""
    float_ops = {s.lower() for s in (cfg.trigger_float_op or [])}
    base = {n: getattr(cfg, n) for n in QuantSettings.names() if n != "trigger_float_op" and hasattr(cfg, n)}
    for key in ("calibration_strategy_for_weight", "calibration_strategy_for_activation"):
        base[key] = check_strategy(base[key], "cfg: ")
    overrides = _read_opt_config(opt_config_path, graph) if opt_config_path else {}
    graph_outputs = {t.name for t in graph.output_tensors}
    result = {}
    for node in graph.nodes:
        values = dict(base)
        values["trigger_float_op"] = node.name.lower() in float_ops or node.type.lower() in float_ops
        if any(t.name in graph_outputs for t in node.outputs):
            # a model's outputs are its answer: a clipping strategy that flattens the
            # largest logits changes the argmax (kld: Lite0 top-1 0.62 instead of 0.87)
            values["calibration_strategy_for_activation"] = OUTPUT_STRATEGY
        for key, value in overrides.get(node.name, {}).items():
            values[key] = value
        result[node.name] = QuantSettings(**values)
    return result


def _read_opt_config(path: str, graph) -> Dict[str, dict]:
    if not os.path.isfile(path):
        raise ConfigError(f"opt_config '{path}' not found")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
        raise ConfigError(f"opt_config '{path}' is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"opt_config '{path}': expected an object of layer names")
    names = [n.name for n in graph.nodes]
    known = [n for n in QuantSettings.names() if n != "histc_bins"]
    out = {}
    for layer, entry in data.items():
        if layer not in names:
            close = difflib.get_close_matches(layer, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"opt_config '{path}': no layer named '{layer}' in the graph{hint}")
        if not isinstance(entry, dict):
            raise ConfigError(f"opt_config '{path}': layer '{layer}': expected an object of settings")
        parsed = {}
        for key, value in entry.items():
            if key in TEMPLATE_IGNORED_KEYS:
                continue
            if key not in known:
                raise ConfigError(f"opt_config '{path}': layer '{layer}': unknown setting '{key}' "
                                  f"(known: {', '.join(known)})")
            where = f"opt_config '{path}': layer '{layer}'"
            if key == "trigger_float_op":
                if not isinstance(value, bool):
                    raise ConfigError(f"{where}: trigger_float_op must be true or false")
                parsed[key] = value
            elif key.startswith("calibration_strategy"):
                parsed[key] = check_strategy(str(value), f"{where}: ")
            else:
                text = str(value).lower() if isinstance(value, bool) else str(value)
                parsed[key] = parse_field(key, text, where) if key in FIELDS else value
        out[layer] = parsed
    return out


def write_template(path: str, graph, settings: Dict[str, QuantSettings]) -> None:
    """Every layer's effective settings, in the opt_config format (layer_type is informative)."""
    data = OrderedDict()
    for node in graph.nodes:
        if node.type in BOUNDARY_TYPES or node.name not in settings:
            continue
        entry = OrderedDict(layer_type=node.type)
        entry.update((k, v) for k, v in settings[node.name].as_dict().items() if k != "histc_bins")
        data[node.name] = entry
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


# ---- calibration -----------------------------------------------------------
class Calibrator:
    """Statistics of every tensor over the calibration batches."""

    def __init__(self, graph, bins: int, momentum: float):
        self.graph = graph
        self.stats: Dict[str, Statistics] = {t.name: Statistics(bins, momentum) for t in graph.tensors}
        self._warned: List[str] = []  # tensors with NaN/Inf, in the order they were seen

    def observe(self, node: PyNode) -> None:
        for t in node.outputs:
            v = t.betensor
            if not v.is_floating_point():  # integer tensors are qinvariant (PyGraph.mark_integer_tensors)
                continue
            s = self.stats[t.name]
            before = s.nonfinite
            s.update(v)
            if s.nonfinite > before and t.name not in self._warned:
                if not self._warned:
                    OPT_WARN(f"calibration: tensor '{t.name}' (layer '{node.name}') has NaN/Inf values; "
                             f"they are left out of its statistics")
                self._warned.append(t.name)

    def run(self, batches: Iterable[List[torch.Tensor]]) -> Dict[str, Statistics]:
        n = 0
        for inputs in batches:
            self.graph.forward(inputs, after_node=self.observe)
            n += 1
        if n == 0:
            raise QuantizeError("calibration: the calibration set gave no batch")
        if len(self._warned) > 1:  # one warning, not one per tensor the bad values flow into
            more = self._warned[1:]
            OPT_WARN(f"calibration: NaN/Inf values also reached {len(more)} other tensor(s) "
                     f"({', '.join(more[:3])}{', ...' if len(more) > 3 else ''}); left out of their statistics")
        return self.stats


def attach_statistics(graph, stats: Dict[str, Statistics]) -> None:
    missing = [t.name for t in graph.tensors if t.name not in stats]
    if missing:
        raise ConfigError(f"statistics lack tensor(s) {', '.join(missing[:5])}: the statistic_file "
                          f"belongs to another model; delete it to calibrate again")
    for t in graph.tensors:
        t.statistics = stats[t.name]
        if t.statistics.empty and not t.qinvariant:
            if t.statistics.nonfinite:
                OPT_WARN(f"tensor '{t.name}' had no finite calibration value; its range is [0, 0]")


# ---- the quantized graph ------------------------------------------------------
def float_layers(graph, settings: Dict[str, QuantSettings]) -> Set[str]:
    """Layers kept in float: asked for (trigger_float_op), or of a type with no quantize function."""
    out = set()
    for node in graph.nodes:
        if settings[node.name].trigger_float_op:
            out.add(node.name)
        elif OP_QUANTIZERS.get(node.type) is None:
            OPT_WARN(f"layer '{node.name}': layer type '{node.type}' has no quantize function; "
                     f"it stays in float (mixed precision)")
            out.add(node.name)
    return out


def build_quantized_graph(float_graph, settings: Dict[str, QuantSettings], keep_float: Set[str]):
    """A quantized copy of `float_graph`; layers in `keep_float` (and layers that
    turn out Unsupported) stay in float behind DeQuantize/Quantize layers."""
    keep_float = set(keep_float)
    while True:
        graph = copy.deepcopy(float_graph)
        _insert_boundaries(graph, keep_float, settings)
        try:
            for node in graph.nodes:
                if node.name in keep_float or node.type == OpType.DeQuantize:
                    continue
                node.attrs["qsettings"] = settings.get(node.name) or settings[node.attrs["boundary_of"]]
                node.quantize()
                node.quantized = True
            mark_unquantifiable(graph)
            return graph, keep_float
        except Unsupported as e:
            OPT_WARN(f"{e}; kept in float (mixed precision)")
            keep_float.add(node.name)


def mark_unquantifiable(graph) -> None:
    """`unquantifiable` on every layer, as the tool chain writes it: true for layers kept
    in float and for the Quantize/DeQuantize layers at their boundaries."""
    for node in graph.nodes:
        node.params["unquantifiable"] = (not node.quantized) or node.type in BOUNDARY_TYPES


def _insert_boundaries(graph, keep_float: Set[str], settings) -> None:
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    made: Dict[tuple, PyTensor] = {}
    new_nodes = []
    for node in list(graph.nodes):
        is_float = node.name in keep_float
        for i, t in enumerate(node.inputs):
            src = producer[t.name]
            if t.qinvariant or (src.name in keep_float) == is_float:
                continue
            kind = OpType.DeQuantize if is_float else OpType.Quantize
            key = (kind, t.name)
            if key not in made:
                suffix = "dequantize" if is_float else "quantize"
                b = PyNode(_unique(graph, f"{t.name}_{suffix}"), kind)
                nt = PyTensor(b.name, t.betensor, Dtype.FP32 if is_float else t.dtype, t.ir_shape)
                nt.statistics = t.statistics
                b.inputs, b.outputs = [t], [nt]
                b.attrs["boundary_of"] = node.name
                settings[b.name] = settings[node.name]
                made[key] = nt
                new_nodes.append(b)
            node.inputs[i] = made[key]
    if new_nodes:
        graph.nodes.extend(new_nodes)
        graph.relink()


def _unique(graph, name: str) -> str:
    names = {n.name for n in graph.nodes} | {t.name for t in graph.tensors}
    out, i = name, 1
    while out in names:
        out, i = f"{name}_{i}", i + 1
    return out


def dequantized(t: PyTensor, value: torch.Tensor = None) -> torch.Tensor:
    v = t.betensor if value is None else value
    if v.is_floating_point() or t.qinvariant or not t.is_quantized:
        return v.to(torch.float32) if v.is_floating_point() else v
    return qmath.dequantize(v, t.scale, t.zerop)


def layer_similarity(float_graph, qgraph, inputs: List[torch.Tensor]) -> List[dict]:
    """Cosine similarity and MSE of every tensor both graphs compute, worst first."""
    float_graph.forward(inputs, keep_tensors=True)
    ref = {t.name: t.betensor.detach().to(torch.float32) for t in float_graph.tensors
           if t.betensor.is_floating_point()}
    qgraph.forward(inputs, keep_tensors=True)
    rows = []
    for node in qgraph.nodes:
        if node.type in BOUNDARY_TYPES:
            continue
        for t in node.outputs:
            if t.name not in ref or ref[t.name].shape != t.betensor.shape:
                continue
            a, b = ref[t.name].reshape(-1).double(), dequantized(t).reshape(-1).double()
            finite = torch.isfinite(a) & torch.isfinite(b)
            a, b = a[finite], b[finite]
            denom = float(a.norm() * b.norm())
            cos = float((a * b).sum()) / denom if denom > 0 else (1.0 if float(a.norm() + b.norm()) == 0 else 0.0)
            mse = float(((a - b) ** 2).mean()) if a.numel() else 0.0
            rows.append({"layer": node.name, "type": node.type, "tensor": t.name,
                         "quantized": bool(node.quantized), "cosine": cos, "mse": mse})
    for g in (float_graph, qgraph):
        for t in g.tensors:
            t.betensor = torch.zeros(())
    rows.sort(key=lambda r: (r["cosine"] if math.isfinite(r["cosine"]) else -2.0))
    return rows
