"""The quantization plan of one run: the decisions as data that algorithms read and
edit, over the calibrated float graph, and the quantized graph that follows from them.

Each layer's settings are resolved once from the cfg (settings.layer_values: the cfg,
its per-layer forms, the opt_config) and set as the layer's attrs['qsettings']; global
calibration methods and unify_scales* add ranges and roundings to the float graph's
tensors and layers. `build` makes the quantized graph once; `change` edits one
layer's settings and quantizes again only that layer and the layers whose inputs'
quantization that changes (quantizer.requantize), which gives the quantized graph a
fresh run with those settings in its opt_config gives.

Algorithms that measure decisions (global calibration methods, unify_scales*) read
them from `realised()`, the plan realised as a quantized graph that the plan makes
when first asked and keeps current: an algorithm that edits the plan of some layers
(their planned ranges or roundings, their float constants) calls `replan(layers)`, which
quantizes again only those layers and the layers the change reaches. No algorithm
builds a quantized graph or calls an op's quantize function itself."""
import contextlib
import copy
import dataclasses
import logging
import re
from typing import Dict, Optional, Set

import torch

from ..errors import ConfigError
from ..ir.compat import warn_other_grids
from ..logger import OPT_INFO
from ..passes.batch_dim import parallel_batches, written_batch
from .qconfig import apply_qconfig
from .quantizer import build_quantized_graph, float_layers, quantized_graph_edits, requantize, warn_float16_ranges
from .settings import QuantSettings, layer_values, note_settings, settings_of
from .weight_plans import PLANNED_ATTRS


class QuantPlan:
    def __init__(self, cfg, graph, device=torch.device("cpu")):
        self.cfg, self.graph, self.device = cfg, graph, device
        for name in ("modify_batch_dim", "export_parallel_batch"):
            if getattr(cfg, name, False) and getattr(cfg, "without_batch_dim", False):
                raise ConfigError(f"field '{name}': the IR has no batch axis (without_batch_dim = true)")
        self.values: Dict[str, dict] = layer_values(cfg, graph)
        self.settings: Dict[str, QuantSettings] = {name: QuantSettings(**v) for name, v in self.values.items()}
        for node in graph.nodes:
            node.attrs["qsettings"] = self.settings[node.name]
        if getattr(cfg, "qconfig", ""):
            for name in apply_qconfig(cfg, graph, self.values):
                self.settings[name] = QuantSettings(**self.values[name])
                graph.node(name).attrs["qsettings"] = self.settings[name]
        note_settings(cfg, graph, self.settings)
        self.qgraph = None
        self.float_kept: Set[str] = set()
        self._realised = None

    def settings_for(self, node, **changed) -> QuantSettings:
        """The settings the cfg gives a layer a global calibration method adds to the graph,
        with the values `changed` (what they derive derived anew)."""
        return QuantSettings(**{**layer_values(self.cfg, self.graph, [node])[node.name], **changed})

    def adopt(self, node) -> None:
        """A layer a global calibration method added, with the settings it brought."""
        if node.name not in self.settings:
            st = node.attrs["qsettings"]
            self.settings[node.name] = st
            self.values[node.name] = {f.name: getattr(st, f.name) for f in dataclasses.fields(st)}

    def build(self):
        """The quantized graph of the float graph and this plan (layers kept in float behind
        Quantize/DeQuantize layers); kept as `qgraph`, with the layers left in float."""
        self.forget()  # what algorithms measured is in the float graph's plan now
        keep = float_layers(self.graph, self.settings)
        with quantized_graph_edits(self.graph, self.cfg):
            self.qgraph, self.float_kept = build_quantized_graph(self.graph, self.settings, keep)
        warn_float16_ranges(self.qgraph, self.graph)
        warn_other_grids(self.qgraph)
        return self.qgraph

    def as_written(self, qgraph):
        """`qgraph` as the IR is written: with the cfg's modify_batch_dim inside, or as the
        copies of export_parallel_batch (passes/batch_dim.py)."""
        cfg = self.cfg
        if getattr(cfg, "export_parallel_batch", False):
            return contextlib.nullcontext(parallel_batches(qgraph, cfg.export_parallel_batch, cfg.data_batch_dim))
        if getattr(cfg, "modify_batch_dim", False):
            return written_batch(qgraph, cfg.modify_batch_dim, cfg.data_batch_dim)
        return contextlib.nullcontext(qgraph)

    def realised(self):
        """The plan realised as a quantized graph on the run's device (the ranges and
        roundings planned so far included): what global calibration methods and
        unify_scales* measure and read decisions from. Made when first asked for (and
        after `forget`), then kept current by `replan` and `change`; the pipeline's
        `qgraph` is built apart (`build`)."""
        if self._realised is None:
            self._realised = self._realise()
        return self._realised

    def replan(self, *layers: str) -> Optional[Set[str]]:
        """Bring `realised()` up to date after an algorithm edited the plan of `layers`
        (their tensors' planned ranges, their weights' planned roundings, their float
        constants): those layers are quantized again, and the layers the change reaches.
        Returns them, or None where it was made whole again (or is not made yet)."""
        if self._realised is None or not layers:
            return None
        with _said_once(), quantized_graph_edits(self.graph, self.cfg):
            redone = requantize(self._realised, self.graph, self._current_settings(), set(layers))
        if redone is None:  # made whole again in the same graph object: algorithms may hold it
            vars(self._realised).update(vars(self._realise()))
        self._realised.to(self.device)
        return redone

    def forget(self) -> None:
        """Drop `realised()` after edits `replan` cannot follow (a method that changed the
        float graph: its weights, its layers); the next caller makes it anew."""
        self._realised = None

    def _current_settings(self) -> Dict[str, QuantSettings]:
        return {n.name: settings_of(n) for n in self.graph.nodes}  # layers a running method added too

    def _realise(self):
        settings = self._current_settings()
        with _said_once(), quantized_graph_edits(self.graph, self.cfg):
            qgraph, _ = build_quantized_graph(self.graph, settings, float_layers(self.graph, settings))
        return qgraph.to(self.device)

    def for_metrics(self, qgraph):
        """The quantized graph the metrics run: `qgraph`, or, with the cfg's
        fake_quant_scopes_for_debug / fake_quant_operators_for_debug, a copy whose layers
        of those layer ids / types compute in float (on dequantized inputs, their outputs
        quantized again where an integer layer reads them), to see what those layers cost.
        The written IR is `qgraph`'s."""
        debug = debug_layers(self.cfg, self.graph)
        if not debug:
            return qgraph
        OPT_INFO(f"fake_quant_*_for_debug: the quantized metrics run with {len(debug)} layer(s) in float: "
                 f"{', '.join(sorted(debug)[:8])}{' ...' if len(debug) > 8 else ''} (the IR written is unchanged)")
        with _said_once(), quantized_graph_edits(self.graph, self.cfg):
            graph, _ = build_quantized_graph(self.graph, self.settings, self.float_kept | debug)
        return graph.to(self.device)

    def set_values(self, values: Dict[str, dict]) -> None:
        """Replace the setting values of the named layers (as whole opt_config entries would);
        the next build() quantizes with them (a search trying many layers at once)."""
        for layer, v in values.items():
            self.values[layer] = dict(v)
            self.settings[layer] = QuantSettings(**v)
            self.graph.node(layer).attrs["qsettings"] = self.settings[layer]
        self.forget()

    def layer_state(self, layer: str) -> tuple:
        """What global calibration methods planned and edited of one layer (its planned
        roundings and ranges, its constants, its outputs' planned ranges), to put back with
        `restore_layer_state`: a search measures layers with and without them."""
        node = self.graph.node(layer)
        return (copy.deepcopy({k: node.attrs[k] for k in PLANNED_ATTRS if k in node.attrs}),
                {k: c.betensor.clone() for k, c in node.constants.items()}, [t.ranges_set for t in node.outputs])

    def restore_layer_state(self, layer: str, state: tuple) -> None:
        node = self.graph.node(layer)
        attrs, constants, ranges = state
        for k in PLANNED_ATTRS:
            node.attrs.pop(k, None)
        node.attrs.update(copy.deepcopy(attrs))
        for k, value in constants.items():
            node.constants[k].betensor = value.clone()
        for t, r in zip(node.outputs, ranges):
            t.ranges_set = r

    def change(self, layer: str, **values) -> Optional[Set[str]]:
        """Set settings of `layer` (as an opt_config entry would) and bring `realised()` and,
        once built, `qgraph` up to date: the layers quantized again, or None where the
        whole graph was built again (a layer kept in float, or a change that reaches one)
        or none was built yet."""
        if layer not in self.values:
            raise ConfigError(f"plan: no layer named '{layer}'")
        unknown = sorted(set(values) - set(QuantSettings.names()))
        if unknown:
            raise ConfigError(f"plan: layer '{layer}': unknown setting(s) {', '.join(unknown)} "
                              f"(known: {', '.join(QuantSettings.names())})")
        changed = {k for k, v in values.items() if self.values[layer].get(k) != v}
        self.values[layer] = {**self.values[layer], **values}  # multiplier_bits 0 (the cfg's) is derived anew
        self.settings[layer] = QuantSettings(**self.values[layer])
        self.graph.node(layer).attrs["qsettings"] = self.settings[layer]
        boundaries = bool({"trigger_float_op", "activation_type"} & changed)  # where Quantize layers go
        if boundaries:
            self.forget()
        else:
            self.replan(layer)
        if self.qgraph is None:  # nothing built to bring up to date (a search measures on realised())
            return None
        redone = None
        if not boundaries:
            with _said_once(), quantized_graph_edits(self.graph, self.cfg):
                redone = requantize(self.qgraph, self.graph, self.settings, {layer})
        if redone is None:
            OPT_INFO(f"plan: layer '{layer}' changed; the quantized graph is built again")
            self.build()
        return redone


def debug_layers(cfg, graph) -> Set[str]:
    """The layers fake_quant_scopes_for_debug ([(first id, last id), ...]) and
    fake_quant_operators_for_debug (layer types) name."""
    ids = [int(v) for v in re.findall(r"\d+", cfg.fake_quant_scopes_for_debug or "")]
    scopes = list(zip(ids[0::2], ids[1::2]))
    types = {t.strip().lower() for t in re.split(r"[,\s]+", cfg.fake_quant_operators_for_debug or "") if t.strip()}
    return {n.name for n in graph.nodes if n.type.lower() in types or
            (n.layer_id is not None and any(lo <= int(n.layer_id) <= hi for lo, hi in scopes))}


@contextlib.contextmanager
def _said_once():
    """Builds other than the pipeline's own (`build`) say nothing below errors: the notes
    and warnings about the quantized graph (a layer type without quantize,
    resize_degrade_to_nearest...) are said there, once."""
    log = logging.getLogger("npuopt")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
