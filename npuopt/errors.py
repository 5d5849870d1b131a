"""The project's exception types.

Every error a user can cause is one of these; the CLI catches `NpuoptError`
once and prints its message as one line (the traceback only with --verbose).
"""


def one_line(text) -> str:
    """The non-empty lines of `text`, stripped, joined by spaces: how every error is printed."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


class NpuoptError(Exception):
    """Base of every error npuopt reports to the user."""


class IRError(NpuoptError):
    """The graph or weights file is missing, malformed or inconsistent."""


class GraphError(NpuoptError):
    """The graph is structurally wrong, or a forward computed a wrong shape."""


class ConfigError(NpuoptError):
    """A cfg file, a field or a field's value is wrong."""


class PluginError(NpuoptError):
    """A plugin is missing, failed to import or misbehaves."""


class DatasetError(NpuoptError):
    """A dataset yields data that does not fit the model."""


class QuantizeError(NpuoptError):
    """A layer cannot be quantized with the settings asked for."""


class ExportError(NpuoptError):
    """A PyTorch model cannot be exported to the IR."""
