"""qconfig: the Compass Optimizer's QConfig plugins, a user's script that sets each layer's
quantization by its name or type (OPT's `plugins/aipubt_qconfig_*.py`): the class named by
the cfg field `qconfig`, registered with `register_plugin(PluginType.QConfig)`, is made
with (graph, config) and called once the layers' settings are resolved (cfg, per-layer
forms, opt_config), as the tool chain calls it. It writes layer attrs under the tool
chain's names (`trigger_float_op`, `q_bits_activation`, `q_mode_weight`, ...); those become
the layers' settings here, so the plan, the template and the IR follow them. While it
runs, each layer's `children` lists the layers that read its outputs."""
from typing import Dict, Set

from ..config import FIELDS, FLOAT_MODES, parse_field
from ..errors import ConfigError, PluginError
from ..logger import OPT_INFO
from ..node import SETTING_OF_ATTR
from ..registry import PLUGINS, PluginType, failed_imports, plugin_code


def apply_qconfig(cfg, graph, values: Dict[str, dict]) -> Set[str]:
    """Run the cfg's QConfig plugin on `graph` (its layers' attrs derived from their current
    settings) and fold the attrs it set into `values` (each layer's setting values); the
    layers whose settings it changed."""
    name = cfg.qconfig
    reg = PLUGINS[PluginType.QConfig].best(name)
    if reg is None:
        known = ", ".join(PLUGINS[PluginType.QConfig].keys()) or "none"
        raise PluginError(f"field 'qconfig': no QConfig plugin '{name}' (known: {known}){failed_imports()}")
    readers = {t.name: [n for n in graph.nodes if t in n.inputs] for n in graph.nodes for t in n.outputs}
    for node in graph.nodes:
        node.children = [c for t in node.outputs for c in readers.get(t.name, [])]
    try:
        with plugin_code(reg, f"the QConfig plugin '{name}'"):
            reg.obj(graph, cfg)()
    finally:
        for node in graph.nodes:
            node.__dict__.pop("children", None)
    changed = set()
    for node in graph.nodes:
        for attr in [k for k in dict.keys(node.attrs) if k in SETTING_OF_ATTR]:
            setting = SETTING_OF_ATTR[attr]
            value = _setting(setting, dict.pop(node.attrs, attr), f"qconfig '{name}': layer '{node.name}'")
            if values[node.name].get(setting) != value:
                values[node.name][setting] = value
                changed.add(node.name)
    OPT_INFO(f"qconfig {name}: the plugin set the settings of {len(changed)} layer(s)")
    return changed


def _setting(setting: str, value, where: str):
    """An attr value a plugin set, as the setting's typed value (one line when it is not one)."""
    if setting == "trigger_float_op":
        if isinstance(value, bool):
            return value
        mode = str(value).strip().lower()
        if mode.rstrip("!") not in FLOAT_MODES:
            raise ConfigError(f"{where}: trigger_float_op '{value}' is not one of {', '.join(FLOAT_MODES)}")
        return False if mode == "disable" else mode
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return parse_field(setting, text, where) if setting in FIELDS else value
