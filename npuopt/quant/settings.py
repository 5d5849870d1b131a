"""A layer's effective quantization settings: the cfg's fields (with their per-layer
forms), overridden per layer by the JSON opt_config; and the template of every
layer's settings, written in the opt_config's format."""
import difflib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Dict, List

from ..config import FIELDS, default_of, parse_field
from ..errors import ConfigError
from .strategies import check_strategy

TEMPLATE_IGNORED_KEYS = ("layer_type",)
OUTPUT_STRATEGY = "extrema"  # for layers writing a graph output, unless opt_config says otherwise


def _cfg_default(name: str):
    """The default is the cfg field's: one source for every default."""
    return field(default_factory=lambda: default_of(name))


@dataclass
class QuantSettings:
    quantize_method_for_weight: str = _cfg_default("quantize_method_for_weight")
    quantize_method_for_activation: str = _cfg_default("quantize_method_for_activation")
    weight_bits: int = _cfg_default("weight_bits")
    activation_bits: int = _cfg_default("activation_bits")
    bias_bits: int = _cfg_default("bias_bits")
    lut_items_in_bits: int = _cfg_default("lut_items_in_bits")
    calibration_strategy_for_weight: str = _cfg_default("calibration_strategy_for_weight")
    calibration_strategy_for_activation: str = _cfg_default("calibration_strategy_for_activation")
    histc_bins: int = _cfg_default("histc_bins")
    multiplier_bits: int = _cfg_default("multiplier_bits")  # 0: the activation bits, at most 15
    unify_shifts_for_aiff: bool = _cfg_default("unify_shifts_for_aiff")
    trigger_float_op: bool = False    # this layer is named by the cfg's trigger_float_op

    def __post_init__(self):
        if not self.multiplier_bits:
            self.multiplier_bits = min(int(self.activation_bits), 15)

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def as_dict(self):
        return OrderedDict((n, getattr(self, n)) for n in self.names())


@dataclass(frozen=True)
class QuantMethod:
    """A quantize_method_* value taken apart."""
    per_channel: bool
    symmetric: bool
    full_range: bool

    @classmethod
    def parse(cls, method: str) -> "QuantMethod":
        m = method.lower()
        return cls(m.startswith("per_channel"), "_symmetric" in m, "restricted" not in m)


def settings_of(node) -> QuantSettings:
    return node.attrs.get("qsettings") or QuantSettings()


def opt_config_keys(path: str) -> Dict[str, set]:
    """{layer: keys it sets} of a JSON opt_config (empty when there is none): what the
    opt_config sets wins over the cfg's per-layer forms, as in the Compass Optimizer.
    The file's errors are reported where the opt_config is read and validated."""
    if not path or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: set(v) for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def apply_cfg_per_layer(cfg, nodes, settings: Dict[str, QuantSettings]) -> Dict[str, List[str]]:
    """Put the cfg's per-layer values (`x & <[Type]:y>`, quant_type, OPT's float modes)
    into each layer's settings. Returns {field: per-layer keys that named no layer}."""
    from ..config import QUANT_TYPE_BITS
    nodes = list(nodes)
    fixed = opt_config_keys(getattr(cfg, "opt_config", ""))
    names = set(QuantSettings.names())
    per_layer = getattr(cfg, "per_layer", {})
    derive_multiplier = not getattr(cfg, "multiplier_bits", 0) and "multiplier_bits" not in per_layer
    for node in nodes:
        st = settings.get(node.name)
        if st is None:
            continue
        own = fixed.get(node.name, set())

        def put(key, value):
            if key not in own:
                setattr(st, key, value)
        bits = QUANT_TYPE_BITS.get(cfg.of("quant_type", node)) if hasattr(cfg, "quant_type") else None
        if bits is not None:
            for key, value in zip(("activation_bits", "weight_bits", "bias_bits", "lut_items_in_bits"), bits):
                put(key, value)
        for key, pl in per_layer.items():
            if key == "trigger_float_op":
                put(key, pl.get(node) != "disable")
            elif key in names:
                hit, value = pl.local(node)
                if hit:
                    put(key, value)
        if derive_multiplier and "multiplier_bits" not in own:
            st.multiplier_bits = min(int(st.activation_bits), 15)
    return {key: pl.unmatched(nodes) for key, pl in per_layer.items() if pl.unmatched(nodes)}


# ---- the settings of a graph's layers, and their template ----------------------------
def layer_settings(cfg, graph, opt_config_path: str = "") -> Dict[str, QuantSettings]:
    """Effective settings of every layer: the cfg's fields, then the layer's entry in
    the JSON opt_config ({"layer_name": {"weight_bits": 4, ...}}), validated."""
    float_ops = {s.lower() for s in (cfg.trigger_float_op or [])}
    base = {n: getattr(cfg, n) for n in QuantSettings.names() if n != "trigger_float_op" and hasattr(cfg, n)}
    for key in ("calibration_strategy_for_weight", "calibration_strategy_for_activation"):
        base[key] = check_strategy(base[key], "cfg: ")
    overrides = read_opt_config(opt_config_path, graph) if opt_config_path else {}
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
    from .quantizer import BOUNDARY_TYPES  # quantizer.py imports this module
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
