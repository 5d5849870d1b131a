"""The cfg file's machinery: fields registered with a parser, the per-layer form, and
reading an INI file with a [Common] section into a Config. The fields themselves (the
Compass Optimizer's and npuopt's) are registered in npuopt/config.py, the module to
import: it also gives these names.

Fields marked `per_layer` also take the per-layer form
`global & <[Type1,Type2]:v1> <[(id1,id2),(id3,id4)]:v2> <{name regex}:v3>`:
layer-id ranges win over types (a type also matches an Activation's method),
types over name patterns, and the global value applies to the rest.
"""
import configparser
import difflib
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set, Tuple

from .errors import ConfigError
from .logger import OPT_INFO


def as_text(s):
    """The parser of a field that takes any text (a path, a name)."""
    return s


@dataclass
class Field:
    name: str
    default: str
    parse: Callable[[str], object]
    help: str
    accepts: str
    is_path: bool = False
    no_effect: str = ""                 # why the field changes nothing in npuopt
    unsupported: Optional[Callable[[object], str]] = None  # what a value asks that npuopt lacks ('' if none)
    per_layer: bool = False
    global_of: Optional[Callable[["PerLayer"], object]] = None  # the plain value of a per-layer one


FIELDS: Dict[str, Field] = {}
PER_LAYER_ACCEPTS = " (also per layer: 'v & <[Type,...]:v1> <[(id1,id2),...]:v2> <{name regex}:v3>')"


def register_field(name, default, parse, help, accepts, is_path=False, *, no_effect="", unsupported=None,
                   per_layer=False, global_of=None) -> Field:
    if per_layer:
        parse = _per_layer(parse)
        accepts += PER_LAYER_ACCEPTS
    field = Field(name, default, parse, help, accepts, is_path, no_effect, unsupported, per_layer, global_of)
    FIELDS[name] = field
    return field


# ---- per-layer values -----------------------------------------------------------------
class PerLayer:
    """A value that differs per layer (the cfg's `global & <key:value>...` form)."""

    def __init__(self, default):
        self.default = default
        self.ranges: List[Tuple[int, int, object]] = []
        self.types: Dict[str, object] = {}
        self.names: List[Tuple[str, object]] = []

    def values(self) -> list:
        return [self.default] + [v for *_, v in self.ranges] + list(self.types.values()) + [v for _, v in self.names]

    def local(self, node):
        """(True, value) when a per-layer part names this layer, else (False, the global value)."""
        lid = getattr(node, "layer_id", None)
        for lo, hi, value in self.ranges:
            if lid is not None and lo <= int(lid) <= hi:
                return True, value
        keys = [str(node.type).lower()]
        if keys[0] == "activation":
            keys.append(str(node.params.get("method", "")).lower())
        for key in keys:
            if key in self.types:
                return True, self.types[key]
        for pattern, value in self.names:
            if re.match(pattern, node.name):
                return True, value
        return False, self.default

    def get(self, node):
        return self.local(node)[1]

    def unmatched(self, nodes) -> List[str]:
        """The per-layer keys that name no layer of `nodes` (most likely a typo)."""
        nodes = list(nodes)
        ids = [int(n.layer_id) for n in nodes if getattr(n, "layer_id", None) is not None]
        kinds = {str(n.type).lower() for n in nodes}
        kinds |= {str(n.params.get("method", "")).lower() for n in nodes if str(n.type).lower() == "activation"}
        out = [f"[{t}]" for t in self.types if t not in kinds]
        out += [f"[({lo},{hi})]" for lo, hi, _ in self.ranges if not any(lo <= i <= hi for i in ids)]
        out += [f"{{{p}}}" for p, _ in self.names if not any(re.match(p, n.name) for n in nodes)]
        return out


_PART = re.compile(r"<([^<>]*)>")
_RANGES = re.compile(r"\[\(\d+,\d+\)(,\(\d+,\d+\))*,?\]")
_TYPES = re.compile(r"\[\w+(,\w+)*,?\]")


def parse_per_layer(text: str, scalar: Callable[[str], object]) -> PerLayer:
    """OPT's per-layer syntax; raises ValueError when the text does not follow it."""
    head, sep, tail = text.partition("&")
    result = PerLayer(scalar(head.strip()))
    if not sep:
        return result
    tail = re.sub(r"\s+", "", tail)
    if not tail or _PART.sub("", tail):
        raise ValueError
    for part in _PART.findall(tail):
        key, colon, value = part.rpartition(":")
        if not colon or not key:
            raise ValueError
        value = scalar(value)
        if _RANGES.fullmatch(key):
            ids = [int(x) for x in re.findall(r"\d+", key)]
            result.ranges += [(ids[k], ids[k + 1], value) for k in range(0, len(ids), 2)]
        elif _TYPES.fullmatch(key):
            for kind in key.strip("[],").split(","):
                result.types[kind.lower()] = value
        elif key.startswith("{") and key.endswith("}"):
            try:
                re.compile(key[1:-1])
            except re.error:
                raise ValueError from None
            result.names.append((key[1:-1], value))
        else:
            raise ValueError
    return result


def _per_layer(scalar):
    def parse(s):
        value = parse_per_layer(s, scalar)
        return value if value.ranges or value.types or value.names else value.default
    return parse


class Config:
    """Parsed field values, as attributes; `source` is the cfg file; `per_layer` holds the
    fields given in the per-layer form (their attribute is the global value)."""

    def __init__(self, values: Dict[str, object], source: str = "<defaults>", per_layer=None, given=()):
        self.__dict__.update(values)
        self.source = source
        self.per_layer: Dict[str, PerLayer] = dict(per_layer or {})
        self.given = set(given)

    def as_dict(self) -> Dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k not in ("source", "per_layer", "given")}

    def of(self, name: str, node):
        """The value of field `name` for layer `node`."""
        pl = self.per_layer.get(name)
        return pl.get(node) if pl is not None else getattr(self, name)


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
        value = field.parse(text) if (text or field.parse is as_text) else field.parse(field.default)
    except ValueError:
        raise ConfigError(f"{source}: field '{name}': '{text}' is not accepted; expects {field.accepts}") from None
    if field.unsupported is not None:
        for v in (value.values() if isinstance(value, PerLayer) else [value]):
            why = field.unsupported(v)
            if why:
                raise ConfigError(f"{source}: field '{name}': {why}")
    return value


def default_of(name: str):
    """The default value of one field, parsed (its global value for per-layer fields)."""
    return _plain(FIELDS[name], parse_field(name, FIELDS[name].default, "<defaults>"))


def defaults(base_dir: str = ".") -> Config:
    """Every field at its default; relative default paths are taken from `base_dir`, as if written there."""
    values = {}
    for name, f in FIELDS.items():
        value = parse_field(name, f.default, "<defaults>", base_dir)
        values[name] = _plain(f, value)
    return Config(values)


def _plain(field: Field, value):
    if not isinstance(value, PerLayer):
        return value
    return field.global_of(value) if field.global_of else value.default


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
    parser.optionxform = str.lower  # names are case-insensitive, as in the Compass Optimizer
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
    per_layer = {}
    given = []
    items = [(name, text, path, base_dir) for name, text in parser["Common"].items()]
    items += [(name.strip().lower(), text, "--set", os.getcwd()) for name, text in (overrides or {}).items()]
    for name, text, source, folder in items:
        value = parse_field(name, text, source, folder)
        values[name] = _plain(FIELDS[name], value)
        if isinstance(value, PerLayer):
            per_layer[name] = value
        else:
            per_layer.pop(name, None)
        given.append(name)
    if not values["graph"]:
        raise ConfigError(f"{path}: field 'graph' is required (the float IR's .txt)")
    if not values["output_dir"]:
        raise ConfigError(f"{path}: field 'output_dir' is empty; give the folder for the outputs (default "
                          f"{FIELDS['output_dir'].default})")
    if values.get("quant_ir_name"):
        values["out_ir_name"] = values["quant_ir_name"]
    for name in dict.fromkeys(given):
        why = FIELDS[name].no_effect
        if why:
            OPT_INFO(f"cfg field '{name}' is accepted and has no effect in npuopt: {why}")
    global _current
    _current = Config(values, path, per_layer, given)
    return _current


def field_table() -> List[Field]:
    return list(FIELDS.values())


def fields_markdown(own: Set[str]) -> str:
    """docs/fields.md: every field as a heading (so guides link to `fields.md#NAME`), its
    default, whether it takes the per-layer form, its help and what it accepts; npuopt's
    fields (`own`) that act, the plugins' fields, then those accepted with no effect."""
    def text(s: str) -> str:  # markdown would read these as markup
        for char in "\\*<>`":
            s = s.replace(char, "\\" + char)
        return s

    def entry(f: Field) -> str:
        default = f"`{f.default}`" if f.default else "empty"
        per_layer = "; per layer" if f.per_layer else ""
        accepts = f.accepts.removesuffix(PER_LAYER_ACCEPTS) if f.per_layer else f.accepts
        return f"### {f.name}\n\nDefault {default}{per_layer}. {text(f.help[:1].upper() + f.help[1:])}. " \
               f"Accepts {text(accepts)}.\n"

    fields = field_table()
    groups = [("Fields", [f for f in fields if f.name in own and not f.no_effect]),
              ("Fields of the built-in plugins", [f for f in fields if f.name not in own]),
              ("Accepted with no effect in npuopt (one logged line says why)", [f for f in fields if f.no_effect])]
    head = ("# cfg fields\n\nGenerated from the field table (npuopt/config.py) by `python tools/gen_docs.py`; "
            "`npuopt --field --markdown` prints this page and `npuopt --field` the same in plain text, and "
            "tests/test_docs.py fails where they differ. How the cfg file is written, the per-layer form "
            "(`v & <[Type,...]:v1> <[(id1,id2),...]:v2> <{name regex}:v3>`, on the fields marked *per layer*) "
            "and the JSON `opt_config`: [cfg.md](cfg.md).\n")
    return "\n".join([head] + [f"## {title}\n\n" + "\n".join(entry(f) for f in group)
                                for title, group in groups if group])
