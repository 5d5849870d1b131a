"""The cfg file: an INI file with a [Common] section, checked against a field registry.

Each field has a name, a default, a parser that validates and converts the
text, and one line of help. Plugins may add fields with `register_field`.
"""
import configparser
import difflib
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List

from .errors import ConfigError


@dataclass
class Field:
    name: str
    default: str
    parse: Callable[[str], object]
    help: str
    accepts: str
    is_path: bool = False


FIELDS: Dict[str, Field] = {}


def register_field(name, default, parse, help, accepts, is_path=False) -> Field:
    field = Field(name, default, parse, help, accepts, is_path)
    FIELDS[name] = field
    return field


# ---- value parsers: each raises ValueError when the text is not accepted ----
def _text(s):
    return s


def _bool(s):
    low = s.lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ValueError


def _int_in(lo, hi):
    def parse(s):
        v = int(s)
        if not lo <= v <= hi:
            raise ValueError
        return v
    return parse


def _int_of(*choices):
    def parse(s):
        v = int(s)
        if v not in choices:
            raise ValueError
        return v
    return parse


def _float_in(lo, hi):
    def parse(s):
        v = float(s)
        if not lo <= v <= hi:
            raise ValueError
        return v
    return parse


def _choice(*choices):
    def parse(s):
        if s.lower() not in choices:
            raise ValueError
        return s.lower()
    return parse


def _name_list(s):
    """Comma-separated names, each optionally with arguments: `TopKMetric,TopKMetric(5)`."""
    items = [m.strip() for m in re.findall(r"[^,(]+(?:\([^)]*\))?", s) if m.strip()]
    for item in items:
        if not re.fullmatch(r"[A-Za-z_][\w.]*(\([^()]*\))?", item):
            raise ValueError
    return items


def _float_ops(s):
    """'disable' (nothing kept in float) or a list of layer types/names."""
    return [] if s.strip().lower() in ("", "disable") else _name_list(s)


QUANTIZE_METHODS = ("per_tensor_symmetric_restricted_range", "per_tensor_symmetric_full_range",
                    "per_channel_symmetric_restricted_range", "per_channel_symmetric_full_range",
                    "per_tensor_asymmetric", "per_channel_asymmetric")
CALIBRATION_STRATEGY = re.compile(r"(extrema|mean|kld|mse|aciq_laplace|\d+(\.\d+)?percentile|\d+(\.\d+)?std)")


def _strategy(s):
    if not CALIBRATION_STRATEGY.fullmatch(s.lower()):
        raise ValueError
    return s.lower()


_STRATEGY_ACCEPTS = "extrema, mean, kld, mse, aciq_laplace, <P>percentile (e.g. 99.99percentile), <N>std (e.g. 3std)"

register_field("graph", "", _text, "the float IR graph file (.txt)", "a file path", is_path=True)
register_field("bin", "", _text, "the IR weights file; default: the graph's name with .bin", "a file path", is_path=True)
register_field("model_name", "", _text, "name of the model in outputs; default: the IR's model_name", "a name")
register_field("output_dir", "./npuopt_output", _text, "folder for the quantized IR, reports and dumps", "a folder path", is_path=True)
register_field("out_ir_name", "", _text, "base name of the written IR (<out_ir_name>_o.txt); default: model_name", "a name")
register_field("dataset", "", _text, "dataset plugin class that reads calibration_data and data (see npuopt --plugin)", "a dataset plugin name")
register_field("calibration_data", "", _text, "input data file for calibration, read by the dataset plugin", "a file path", is_path=True)
register_field("calibration_batch_size", "16", _int_in(1, 1 << 16), "batch size of calibration forwards", "an integer >= 1")
register_field("metric", "", _name_list, "metric plugins, comma-separated, each with optional args: TopKMetric,TopKMetric(5)", "comma-separated plugin names like TopKMetric or TopKMetric(5)")
register_field("data", "", _text, "input data file for metrics, read by the dataset plugin", "a file path", is_path=True)
register_field("label", "", _text, "label file for metrics, read by the dataset plugin", "a file path", is_path=True)
register_field("metric_batch_size", "16", _int_in(1, 1 << 16), "batch size of metric forwards", "an integer >= 1")
register_field("dataloader_workers", "0", _int_in(0, 256), "worker processes of the torch DataLoader (0: load in the main process)", "an integer >= 0")
register_field("quantize_method_for_weight", "per_tensor_symmetric_restricted_range", _choice(*QUANTIZE_METHODS), "how weights are quantized", ", ".join(QUANTIZE_METHODS))
register_field("quantize_method_for_activation", "per_tensor_symmetric_full_range", _choice(*QUANTIZE_METHODS), "how activations are quantized", ", ".join(QUANTIZE_METHODS))
register_field("weight_bits", "8", _int_in(2, 16), "bits of quantized weights", "an integer from 2 to 16")
register_field("activation_bits", "8", _int_of(8, 16), "bits of quantized activations", "8 or 16")
register_field("bias_bits", "32", _int_of(32), "bits of quantized biases", "32")
register_field("multiplier_bits", "", lambda s: int(_int_in(2, 15)(s)) if s else 0,
               "bits of rescale multipliers; empty: the activation bits (at most 15), as the tool chain does",
               "empty or an integer from 2 to 15")
register_field("unify_shifts_for_aiff", "true", _bool,
               "per-channel rescales share one shift (the NPU's AIFF unit needs it); false: a shift per channel",
               "true or false")
register_field("lut_items_in_bits", "8", _int_in(6, 16), "a lookup table has 2**lut_items_in_bits entries", "an integer from 6 to 16")
register_field("calibration_strategy_for_weight", "extrema", _strategy, "how weight statistics become a quantization range", _STRATEGY_ACCEPTS)
register_field("calibration_strategy_for_activation", "mean", _strategy, "how activation statistics become a quantization range", _STRATEGY_ACCEPTS)
register_field("running_statistic_momentum", "0.9", _float_in(0.0, 1.0), "momentum of running-average statistics over calibration batches", "a number from 0 to 1")
register_field("histc_bins", "2048", _int_in(16, 1 << 20), "histogram bins per tensor, used by kld/mse/percentile", "an integer >= 16")
register_field("statistic_file", "", _text, "save calibration statistics here, or load them from here when it exists", "a file path", is_path=True)
register_field("opt_config", "", _text, "JSON file of per-layer overrides (see the written <name>_opt_template.json)", "a file path", is_path=True)
register_field("trigger_float_op", "disable", _float_ops, "layer types or names kept in float, comma-separated, or 'disable'", "'disable' or comma-separated layer types/names")
register_field("dump", "false", _bool, "write every tensor of the first batch as .npy into dump_dir", "true or false")
register_field("dump_dir", "", _text, "folder for dumps; default: <output_dir>/dump", "a folder path", is_path=True)
register_field("device", "auto", _choice("cpu", "cuda", "auto"), "where forwards run: cpu, cuda, or auto (cuda when available)", "cpu, cuda, auto")


class Config:
    """Parsed field values, as attributes; `source` is the cfg file."""

    def __init__(self, values: Dict[str, object], source: str = "<defaults>"):
        self.__dict__.update(values)
        self.source = source

    def as_dict(self) -> Dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "source"}


def parse_field(name: str, text: str, source: str, base_dir: str = "."):
    field = FIELDS.get(name)
    if field is None:
        close = difflib.get_close_matches(name, list(FIELDS), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see npuopt --field"
        raise ConfigError(f"{source}: unknown field '{name}'{hint}")
    text = text.strip()
    if field.is_path and text:
        text = os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))
    try:
        return field.parse(text) if (text or field.parse is _text) else field.parse(field.default)
    except ValueError:
        raise ConfigError(f"{source}: field '{name}': '{text}' is not accepted; expects {field.accepts}") from None


def defaults(base_dir: str = ".") -> Config:
    """Every field at its default; relative default paths are taken from `base_dir`, as if written there."""
    return Config({name: parse_field(name, f.default, "<defaults>", base_dir) for name, f in FIELDS.items()})


_current: Config = None


def current_config() -> Config:
    """The cfg last loaded by load_config (defaults when none was): dataset plugins
    are constructed with file names only, so they read their own fields here."""
    return _current if _current is not None else defaults()


def load_config(path: str, overrides: Dict[str, str] = None) -> Config:
    if os.path.isdir(path):
        raise ConfigError(f"cfg file '{path}' is a folder, not a file")
    if not os.path.isfile(path):
        raise ConfigError(f"cfg file '{path}' not found")
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    parser.optionxform = str
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as e:
        raise ConfigError(f"{path}: cannot parse: {str(e).splitlines()[0]}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x})") from None
    except OSError as e:
        raise ConfigError(f"cannot read cfg file '{path}': {e.strerror or e}") from None
    if "Common" not in parser:
        raise ConfigError(f"{path}: no [Common] section")
    base_dir = os.path.dirname(os.path.abspath(path))
    values = defaults(base_dir).as_dict()
    for name, text in parser["Common"].items():
        values[name] = parse_field(name, text, path, base_dir)
    for name, text in (overrides or {}).items():
        values[name] = parse_field(name, text, "--set", os.getcwd())
    if not values["graph"]:
        raise ConfigError(f"{path}: field 'graph' is required (the float IR's .txt)")
    global _current
    _current = Config(values, path)
    return _current


def field_table() -> List[Field]:
    return list(FIELDS.values())
