"""Built-in operators: one module per layer type, each registering its float
forward and its quantize function with the same decorators a plugin uses."""
import importlib
import pkgutil


def load_builtin_ops() -> None:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


load_builtin_ops()
