"""Finding and importing plugin files.

Searched in order: the built-in `plugins/` (installed as the package
`npuopt_plugins`), `./plugin/`, then each folder of AIPUPLUGIN_PATH. For one
name, the highest version wins; at equal versions, the one loaded last.
"""
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from typing import List

from .logger import OPT_DEBUG, OPT_WARN
from .registry import OP_FORWARDS, OP_QUANTIZERS, PLUGINS


@dataclass
class PluginFailure:
    path: str
    error: str


_loaded: List[str] = []
failures: List[PluginFailure] = []


def builtin_plugin_dir() -> str:
    spec = importlib.util.find_spec("npuopt_plugins")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(here, "plugins")


def plugin_dirs() -> List[str]:
    dirs = [builtin_plugin_dir(), os.path.join(os.getcwd(), "plugin")]
    dirs += [d for d in os.environ.get("AIPUPLUGIN_PATH", "").split(os.pathsep) if d]
    seen, result = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            result.append(real)
    return result


def load_plugins() -> None:
    """Import the built-in ops, then every plugin file found; idempotent."""
    import npuopt.ops  # noqa: F401  (built-in ops register on import)

    for directory in plugin_dirs():
        for fname in sorted(os.listdir(directory)):
            if fname.endswith(".py") and not fname.startswith("_"):
                _load_file(os.path.join(directory, fname))


def _load_file(path: str) -> None:
    if path in _loaded:
        return
    _loaded.append(path)
    module_name = "npuopt_plugin_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(path)[0])
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        OPT_DEBUG(f"loaded plugin file {path}")
    except Exception as e:  # a broken plugin must not stop the others
        sys.modules.pop(module_name, None)
        for registry in [OP_FORWARDS, OP_QUANTIZERS, *PLUGINS.values()]:
            registry.remove_source(path)
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" (line {last.lineno})" if last and last.filename == path else ""
        msg = f"{type(e).__name__}: {e}{where}"
        failures.append(PluginFailure(path, msg))
        OPT_WARN(f"plugin file '{path}' failed to import and is skipped: {msg}")
