"""Finding and importing plugin files.

Searched in order: the built-in `plugins/` (installed as the package
`npuopt_plugins`), `./plugin/`, then each folder of AIPUPLUGIN_PATH. A user's
registration wins over a built-in one of the same name; among the user's, the
highest version wins, at equal versions the one loaded last (npuopt.registry).

As in the Compass Optimizer, plugin folders go on `sys.path` and plugin files
import their siblings: a file X.py of a plugin folder is importable as `X`,
`npuopt.plugins.X` and `npuopt.ops.X` (the names a ported Compass plugin uses).
Each file is executed once whatever name imports it. While a folder's files load,
its X.py also stands for a built-in `npuopt.ops.X` of the same name (the user's
module wins there too), and where no plugin folder has an X.py, `npuopt.ops.X` is the
adapter holding the helpers of the Compass Optimizer's ops/X.py (npuopt.compass_ops:
what a plugin named `aipubt_opt_op_<name>.py` imports from OPT's op modules); built-in
ops keep their own modules.
"""
import importlib.abc
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Dict, List, Optional

from .logger import OPT_DEBUG, OPT_WARN
from .registry import OP_APPROXIMATORS, OP_FORWARDS, OP_QUANTIZERS, PLUGINS, PluginFailure, failures

SIBLING_PACKAGES = ("npuopt.ops", "npuopt.plugins")
# makes `npuopt.plugins.X` importable (a package's submodule); the finder below resolves X
__path__: List[str] = []


_loaded: List[str] = []
_modules: Dict[str, ModuleType] = {}   # real path -> the module of that file
_dirs: List[str] = []                  # plugin folders, the one loading now first


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


def _sibling_file(stem: str) -> Optional[str]:
    for d in _dirs:
        path = os.path.join(d, stem + ".py")
        if os.path.isfile(path):
            return path
    return None


class _SiblingLoader(importlib.abc.Loader):
    def __init__(self, path: str):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        # the import system returns what sys.modules holds under the name afterwards
        sys.modules[module.__name__] = _import_file(self.path)


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Resolves `X`, `npuopt.plugins.X` and `npuopt.ops.X` to a plugin folder's X.py."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, stem = fullname.rpartition(".")
        if package and package not in SIBLING_PACKAGES:
            return None
        if not package and stem in sys.stdlib_module_names:
            return None
        found = _sibling_file(stem)
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, _SiblingLoader(found))


_FINDER = _SiblingFinder()


def _install_finder(dirs: List[str]) -> None:
    for d in reversed(dirs):
        if d not in _dirs:
            _dirs.append(d)
        if d not in sys.path:
            sys.path.insert(0, d)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def load_plugins() -> None:
    """Import the built-in ops and global calibration methods, then every plugin file
    found; idempotent. Every registry is complete afterwards: call it before reading a cfg."""
    import npuopt.ops  # noqa: F401  (built-in ops register on import)
    import npuopt.quant.global_calibration  # noqa: F401  (so do the built-in methods)

    dirs = plugin_dirs()
    _install_finder(dirs)
    for directory in dirs:
        _dirs.remove(directory)
        _dirs.insert(0, directory)
        with _user_modules_over_builtin_ops(directory):
            for fname in sorted(os.listdir(directory)):
                if fname.endswith(".py") and not fname.startswith("_"):
                    _load_file(os.path.join(directory, fname))


class _user_modules_over_builtin_ops:
    """While `directory` loads, `npuopt.ops.X` names its X.py where a built-in module
    npuopt/ops/X.py exists too, and the Compass Optimizer adapter compass_ops.ADAPTERS[X]
    where no plugin folder has an X.py; npuopt's own modules (or none) come back afterwards."""

    def __init__(self, directory: str):
        self.directory = directory
        self.saved: Dict[str, Optional[ModuleType]] = {}

    def __enter__(self):
        for fname in os.listdir(self.directory):
            stem, ext = os.path.splitext(fname)
            if ext == ".py" and f"npuopt.ops.{stem}" in sys.modules:
                self._replace(stem, None)
        from . import compass_ops
        # all imported before any is in place: they import npuopt's own npuopt.ops modules
        adapters = {stem: importlib.import_module(name) for stem, name in compass_ops.ADAPTERS.items()}
        for stem, adapter in adapters.items():
            if _sibling_file(stem) is None:
                self._replace(stem, adapter)
        return self

    def _replace(self, stem: str, module: Optional[ModuleType]) -> None:
        """`npuopt.ops.<stem>` is `module` until __exit__, unless a plugin's module is already."""
        current = sys.modules.get(f"npuopt.ops.{stem}")
        if current is None or not _is_plugin_module(current):
            self.saved.setdefault(stem, current)
            _set_ops_module(stem, module)

    def __exit__(self, *_exc):
        for stem, module in self.saved.items():
            _set_ops_module(stem, module)
        return False


def _set_ops_module(stem: str, module: Optional[ModuleType]) -> None:
    """`npuopt.ops.<stem>` is `module` (None: no module, the finder looks for a sibling)."""
    import npuopt.ops as ops
    name = f"npuopt.ops.{stem}"
    if module is None:
        sys.modules.pop(name, None)
        if isinstance(getattr(ops, stem, None), ModuleType):
            delattr(ops, stem)
    else:
        sys.modules[name] = module
        setattr(ops, stem, module)


def _is_plugin_module(module: ModuleType) -> bool:
    return any(module is m for m in _modules.values())


def _import_file(path: str) -> ModuleType:
    """The module of plugin file `path`, executed on first use (raises what it raises)."""
    real = os.path.realpath(path)
    if real in _modules:
        return _modules[real]
    module_name = "npuopt_plugin_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(real)[0])
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    _modules[real] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del _modules[real]
        sys.modules.pop(module_name, None)
        for registry in [OP_FORWARDS, OP_QUANTIZERS, OP_APPROXIMATORS, *PLUGINS.values()]:
            registry.remove_source(path)
        raise
    OPT_DEBUG(f"loaded plugin file {path}")
    return module


def _load_file(path: str) -> None:
    if path in _loaded:
        return
    _loaded.append(path)
    try:
        _import_file(path)
    except (Exception, SystemExit) as e:  # a broken plugin must not stop the others, nor end npuopt
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" (line {last.lineno})" if last and last.filename == path else ""
        msg = f"{type(e).__name__}: {e}{where}"
        failures.append(PluginFailure(path, msg))
        OPT_WARN(f"plugin file '{path}' failed to import and is skipped: {msg}")
