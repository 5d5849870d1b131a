"""A layer's effective quantization settings, resolved once per run into frozen typed
values: the cfg's fields, then their per-layer forms, then the layer's entry in the
JSON opt_config (one precedence pass, layer_values); and the template of every
layer's settings, written in the opt_config's format."""
import difflib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Dict, Mapping

from ..config import (FIELDS, FLOAT_MODES, FP8_LAYER_TYPES, QUANT_TYPE_SETTINGS, SHAPE_ONLY_TYPES, WEIGHT_ONLY_MODE,
                      default_of, parse_field, quant_type_settings)
from ..dtype import Dtype
from ..errors import ConfigError
from ..logger import OPT_INFO, OPT_WARN
from ..registry import BOUNDARY_TYPES
from .formats import QuantMethod
from .minifloat import FORMATS as MINIFLOAT_FORMATS
from .strategies import check_strategy

TEMPLATE_IGNORED_KEYS = ("layer_type",)
NUMBER_TYPES = ("int",) + tuple(MINIFLOAT_FORMATS)
ACTIVATION_TYPES = tuple(t for t in NUMBER_TYPES if not t.startswith("float4"))  # fp4: weights only
OUTPUT_STRATEGY = check_strategy("extrema")  # for layers writing a graph output, unless opt_config says otherwise
IR_STRATEGY = check_strategy("in_ir")         # compat_quantized_model: the ranges the IR states


# cfg fields the Compass Optimizer copies onto every layer as attrs, where npuopt has no
# per-layer setting for them (read with the field's per-layer form); plugins read them
COMPASS_CFG_ATTRS = (
    "quant_type", "activation_block_size", "running_statistic_momentum",
    "activation_perchannel_min_elements", "regularize_activation_perchannel_scales", "resize_degrade_to_nearest",
    "with_winograd", "min_compatible_zhouyi_target", "bias_effective_bits_auto_adaption", "force_dtype_int",
    "force_shift_positive", "bias_effective_bits", "remain_shift")


def _cfg_default(name: str):
    """The default is the cfg field's: one source for every default."""
    return field(default_factory=lambda: default_of(name))


@dataclass(frozen=True)
class QuantSettings:
    quantize_method_for_weight: QuantMethod = _cfg_default("quantize_method_for_weight")
    quantize_method_for_activation: QuantMethod = _cfg_default("quantize_method_for_activation")
    weight_bits: int = _cfg_default("weight_bits")
    activation_bits: int = _cfg_default("activation_bits")
    bias_bits: int = _cfg_default("bias_bits")
    lut_items_in_bits: int = _cfg_default("lut_items_in_bits")
    calibration_strategy_for_weight: str = _cfg_default("calibration_strategy_for_weight")
    calibration_strategy_for_activation: str = _cfg_default("calibration_strategy_for_activation")
    histc_bins: int = _cfg_default("histc_bins")
    multiplier_bits: int = _cfg_default("multiplier_bits")  # 0: the activation bits, at most 15
    unify_shifts_for_aiff: bool = _cfg_default("unify_shifts_for_aiff")
    weight_block_size: int = _cfg_default("weight_block_size")
    # kept in float: False, True (named by the cfg's trigger_float_op list) or OPT's float mode
    # ("float16_preferred", "float16_act_int_wht": float activations, integer weights, ...)
    trigger_float_op: object = False
    # the number format of the layer's activations and of its weights: "int" (integers of the
    # bits above), or a scaled minifloat format (quant/minifloat.py: fp8; fp4 for weights only)
    activation_type: str = "int"
    weight_type: str = "int"
    # COMPASS_CFG_ATTRS as the cfg gives them for this layer (not settings: no template entry)
    cfg_attrs: Mapping[str, object] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        """Values given as text (by a plugin or a test) are taken apart here; the cfg's
        and the opt_config's arrive parsed and pass as they are."""
        activation_method = QuantMethod(self.quantize_method_for_activation)
        if int(self.activation_bits) >= 16:  # the tool chain quantizes 16-bit activations symmetric
            activation_method = activation_method.to_symmetric()
        typed = {"quantize_method_for_weight": QuantMethod(self.quantize_method_for_weight),
                 "quantize_method_for_activation": activation_method,
                 "calibration_strategy_for_weight": check_strategy(self.calibration_strategy_for_weight),
                 "calibration_strategy_for_activation": check_strategy(self.calibration_strategy_for_activation),
                 "multiplier_bits": self.multiplier_bits or min(int(self.activation_bits), 15)}
        for key, value in typed.items():
            object.__setattr__(self, key, value)
        for key, allowed in (("activation_type", ACTIVATION_TYPES), ("weight_type", NUMBER_TYPES)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key} '{getattr(self, key)}' is not one of {', '.join(allowed)}")

    @property
    def fp8_activations(self) -> bool:
        """Activations in a scaled fp8 format (the layer computes as the tool chain's fp8 layers)."""
        return self.activation_type != "int"

    @property
    def float_dtype(self) -> Dtype:
        """The dtype a layer kept in float computes and stores in: float16 or bfloat16 as
        its float mode says (float16_preferred, bfloat16_act_int_wht, ...), else float32."""
        mode = self.trigger_float_op if isinstance(self.trigger_float_op, str) else ""
        return Dtype.BFP16 if mode.startswith("bfloat16") else Dtype.FP16 if mode.startswith("float16") else Dtype.FP32

    @property
    def weights_quantized(self) -> bool:
        """Whether a layer's weights are quantized: it computes in integers, or it is kept in
        float with weight-only settings."""
        return not self.trigger_float_op or self.weight_only

    @property
    def weight_only(self) -> bool:
        """Kept in float with quantized weights (a *_act_int_wht, *_act_fp8e4m3fn_wht or
        *_act_fp4e2m1fn_wht float mode)."""
        return isinstance(self.trigger_float_op, str) and bool(WEIGHT_ONLY_MODE.search(self.trigger_float_op))

    @property
    def weights_format(self) -> str:
        """The weights' number format: float8_e4m3fn (float4_e2m1fn) in a *_act_fp8e4m3fn_wht
        (*_act_fp4e2m1fn_wht) mode, else weight_type."""
        mode = WEIGHT_ONLY_MODE.search(self.trigger_float_op) if isinstance(self.trigger_float_op, str) else None
        return {"fp8e4m3fn": "float8_e4m3fn", "fp4e2m1fn": "float4_e2m1fn"}.get(mode.group(1) if mode else "",
                                                                             self.weight_type)

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls) if f.name != "cfg_attrs"]

    def as_dict(self):
        return OrderedDict((n, getattr(self, n)) for n in self.names())


def settings_of(node) -> QuantSettings:
    return node.attrs.get("qsettings") or QuantSettings()


# ---- the settings of a graph's layers, and their template ----------------------------
def note_settings(cfg, graph, settings: Dict[str, QuantSettings]) -> None:
    """The cfg's one-line notes about the layers' settings: per-layer parts that name no
    layer, float modes, restricted 4-bit grids."""
    for key, pl in cfg.per_layer.items():
        unmatched = pl.unmatched(graph.nodes)
        if unmatched:
            OPT_WARN(f"cfg field '{key}': per-layer part(s) {', '.join(unmatched)} name no layer of the graph")
    quant_types = sorted({cfg.of("quant_type", n) for n in graph.nodes} & set(QUANT_TYPE_SETTINGS))
    for q in quant_types:
        what = ", ".join(f"{k} = {v}" for k, v in QUANT_TYPE_SETTINGS[q].items())
        if q in FP8_LAYER_TYPES:
            types = [t for t in FP8_LAYER_TYPES[q] if t not in SHAPE_ONLY_TYPES]
            OPT_INFO(f"quant_type {q}: {what} on the {', '.join(types) or 'no'} layers and the layers that only "
                     f"move values, 8-bit integers on the others, as the tool chain does")
        else:
            OPT_INFO(f"quant_type {q}: {what} on every layer it is set for (OPT 4.2 resets it per layer and "
                     f"changes nothing)")
    if not QuantMethod(cfg.quantize_method_for_activation).symmetric and any(
            st.activation_bits >= 16 for st in settings.values()):
        OPT_INFO(f"16-bit activations are quantized {QuantMethod(cfg.quantize_method_for_activation).to_symmetric()}, "
                 f"as the tool chain does, not {cfg.quantize_method_for_activation}")
    unshifted = sorted({n.type for n in graph.nodes if n.type in ("ConvTranspose", "ConvTranspose3D", "MatMul")
                        and cfg.of("remain_shift", n) != ""})
    if unshifted:
        OPT_INFO(f"remain_shift: {', '.join(unshifted)} layers are quantized without the ahead shift (npuopt shifts "
                 "Convolution, DepthwiseConv, Convolution3D and FullyConnected ahead)")
    if getattr(cfg, "compat_quantized_model", False):
        tops = [t for n in graph.nodes for t in n.outputs]
        OPT_INFO(f"compat_quantized_model: activations take the ranges the IR states (layer_top_range, or "
                 f"layer_top_scale/zp on the 8-bit grid) for {sum(t.ir_range is not None for t in tops)} of "
                 f"{len(tops)} tensors, the others their calibrated extrema")
    modes = cfg.per_layer.get("trigger_float_op")
    if modes is not None and any(m != "disable" for m in modes.values()):
        OPT_INFO("trigger_float_op: layers in a float mode are kept in float: computed in float64 (each top rounded to "
                 "float32), their tops and constants (biases aside) rounded to and written as float16/bfloat16 in those "
                 "modes; *_act_int_wht (*_act_fp8e4m3fn_wht, *_act_fp4e2m1fn_wht) modes store the weights of linear layers as "
                 "integers (fp8, fp4: weight-only quantization)")
    restricted = sorted({st.quantize_method_for_weight for st in settings.values() if st.weight_bits <= 4
                         and not st.quantize_method_for_weight.full_range})
    if restricted:
        OPT_INFO(f"{restricted[0]} with 4 or fewer weight bits uses one level less than the bits give (-7..7 "
                 "at 4 bits); per_channel_asymmetric or a *_full_range method keeps it (docs/formats.md: 4-bit weights)")


def layer_settings(cfg, graph) -> Dict[str, QuantSettings]:
    """Each layer's settings, from its layer_values."""
    return {name: QuantSettings(**values) for name, values in layer_values(cfg, graph).items()}


def layer_values(cfg, graph, nodes=None) -> Dict[str, dict]:
    """Each layer's (or only `nodes`') setting values in one precedence pass: the cfg's value; "extrema" for
    a layer writing a graph output; quant_type's bits (and formats); the cfg's per-layer
    forms (`x & <[Type]:y>`, OPT's float modes); the layer's entry in the JSON opt_config
    ({"layer": {"weight_bits": 4}}). What QuantSettings derives (multiplier_bits left 0)
    is not in them, so values changed later derive it again as a fresh run would."""
    float_ops = {s.lower() for s in (cfg.trigger_float_op or [])}
    names = [n for n in QuantSettings.names() if n != "trigger_float_op"]
    base = {n: getattr(cfg, n) for n in names if hasattr(cfg, n)}
    if getattr(cfg, "compat_quantized_model", False):  # the source model's ranges, where the IR states them
        base["calibration_strategy_for_activation"] = IR_STRATEGY
    opt_config = read_opt_config(cfg.opt_config, graph) if cfg.opt_config else {}
    graph_outputs = {t.name for t in graph.output_tensors}

    def of(node, integer: bool = False) -> dict:
        values = {**base, **_layer_values(cfg, node, float_ops, graph_outputs, integer),
                  **opt_config.get(node.name, {}),
                  "cfg_attrs": {f: cfg.of(f, node) for f in COMPASS_CFG_ATTRS if hasattr(cfg, f)}}
        if node.subgraphs and not values["trigger_float_op"]:
            values["trigger_float_op"] = control_flow_float_mode(cfg)
        return values
    values = {node.name: of(node) for node in nodes or graph.nodes}
    for node in [] if nodes else _read_as_integers(graph, values, graph_outputs, opt_config):
        values[node.name] = of(node, integer=True)
    return values


def control_flow_float_mode(cfg) -> str:
    """The float mode of a layer that runs subgraphs (If, Loop) and of the subgraphs, where
    the cfg keeps it quantized: the tool chain keeps them in float, in the cfg's global float
    mode, float16_preferred where that is disable."""
    modes = cfg.per_layer.get("trigger_float_op")
    mode = modes.default if modes is not None else "disable"
    return "float16_preferred" if mode == "disable" else mode


# layers whose values are the same in either format: they may take their readers'
FLEXIBLE_TYPES = ("Input", "Constant") + SHAPE_ONLY_TYPES


def _read_as_integers(graph, values, graph_outputs, opt_config) -> list:
    """The layers an fp8 quant_type gives an fp8 format as graph inputs, constants or
    layers that only move values, whose output an integer layer reads too (through others
    of their kind): they take 8-bit integers instead (as on the quant_type's other
    layers) and their fp8 readers convert, the same conversions, but the integer readers
    (a residual Add) get 8-bit precision, not fp8's (transformer_encoder's output cosine
    0.99865 -> 0.99899). Where the opt_config names a layer's activation_type, it stays."""
    found = []
    for node in reversed(graph.nodes):
        v = values[node.name]
        if node.type not in FLEXIBLE_TYPES or v.get("activation_type", "int") == "int" or \
                "activation_type" in opt_config.get(node.name, {}) or \
                any(t.name in graph_outputs for t in node.outputs):
            continue
        if any(values[r.name].get("activation_type", "int") == "int" for r in graph.successors(node)):
            v["activation_type"] = "int"   # for the layers before it; its values are made anew
            found.append(node)
    return found


def _layer_values(cfg, node, float_ops, graph_outputs, integer: bool = False) -> dict:
    """What the cfg says of this layer beyond its plain values (later keys win); `integer`:
    an fp8 quant_type's integer settings (_read_as_integers)."""
    values = {"trigger_float_op": node.name.lower() in float_ops or node.type.lower() in float_ops}
    if any(t.name in graph_outputs for t in node.outputs) and not getattr(cfg, "compat_quantized_model", False):
        # a model's outputs are its answer: a clipping strategy that flattens the
        # largest logits changes the argmax (kld: Lite0 top-1 0.62 instead of 0.87)
        values["calibration_strategy_for_activation"] = OUTPUT_STRATEGY
    # a pre-quantized source's layer keeps its integer grids (ir/compat.py): an fp8 quant_type does not reach it
    stated = node.holds_source_grids
    values.update(quant_type_settings(cfg.of("quant_type", node), node.type, node.params.get("with_activation", "NONE"),
                                      minifloat=not integer and not stated))
    for key, pl in cfg.per_layer.items():
        if key == "trigger_float_op":
            mode = pl.get(node)
            values[key] = False if mode == "disable" else mode
        elif key in QuantSettings.__dataclass_fields__:
            hit, value = pl.local(node)
            if hit:
                values[key] = value
    if node.attrs.get("source_float"):  # a pre-quantized source computes it in float (ir/compat.py)
        values["trigger_float_op"] = "float32_preferred"
    elif stated and node.type == "Quantize":  # the source's own conversion into its integers
        values["trigger_float_op"] = False
    return values


def read_opt_config(path: str, graph) -> Dict[str, dict]:
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
                mode = value.lower() if isinstance(value, str) else None
                if not isinstance(value, bool) and (mode is None or mode.rstrip("!") not in FLOAT_MODES):
                    raise ConfigError(f"{where}: trigger_float_op must be true, false or a float mode "
                                      f"({', '.join(FLOAT_MODES[1:])})")
                parsed[key] = value if isinstance(value, bool) else (False if mode == "disable" else mode)
            elif key.startswith("calibration_strategy"):
                parsed[key] = check_strategy(str(value), f"{where}: ")
            elif key in ("activation_type", "weight_type"):
                allowed = ACTIVATION_TYPES if key == "activation_type" else NUMBER_TYPES
                if value not in allowed:
                    raise ConfigError(f"{where}: {key} '{value}' is not one of {', '.join(allowed)}")
                parsed[key] = value
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
