"""Parse and format the IR's `key=value` values.

Values are ints, floats, true/false, bare words, or bracketed lists, possibly
nested. Formatting is the inverse: parse(format(v)) == v.
"""
import math
import re

_INT = re.compile(r"[+-]?\d+\Z")
# a NumPy scalar's repr, as the tool chain's parser writes list params under NumPy 2 (`block_size=[np.int32(2)]`)
_NUMPY_SCALAR = re.compile(r"np\.(?:u?int\d+|float\d+)\((.*)\)\Z")
MAX_DEPTH = 32  # lists nest a few levels in any IR; far deeper is a broken file, not a recursion error


class ValueSyntaxError(ValueError):
    pass


def parse_value(text: str):
    text = text.strip()
    if text.startswith("["):
        value, rest = _parse_list(text, 0)
        if text[rest:].strip():
            raise ValueSyntaxError(f"unexpected text after list: '{text[rest:]}'")
        return value
    return _parse_scalar(text)


def parse_name_list(text: str):
    """A flat list of names (tensor names are words even when they look like numbers)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueSyntaxError(f"expected a bracketed list of names, got '{text}'")
    inner = text[1:-1].strip()
    if "[" in inner or "]" in inner:
        raise ValueSyntaxError(f"expected a flat list of names, got '{text}'")
    names = [p.strip() for p in inner.split(",")] if inner else []
    if "" in names:
        raise ValueSyntaxError(f"empty name in '{text}'")
    return names


def _parse_scalar(tok: str):
    numpy_scalar = _NUMPY_SCALAR.match(tok)
    if numpy_scalar:
        tok = numpy_scalar.group(1)
    if tok == "true":
        return True
    if tok == "false":
        return False
    if _INT.match(tok):
        return int(tok)
    try:
        if any(c.isdigit() for c in tok) or tok.lower() in ("inf", "-inf", "+inf", "nan"):
            return float(tok)
    except ValueError:
        pass
    return tok


def _parse_list(text: str, pos: int, depth: int = 1):
    assert text[pos] == "["
    if depth > MAX_DEPTH:
        raise ValueSyntaxError(f"lists nested deeper than {MAX_DEPTH} levels")
    pos += 1
    items = []
    token = ""
    expect_item = True
    while pos < len(text):
        c = text[pos]
        if c == "[":
            if token.strip():
                raise ValueSyntaxError(f"unexpected '[' after '{token.strip()}'")
            item, pos = _parse_list(text, pos, depth + 1)
            items.append(item)
            expect_item = False
            continue
        if c in ",]":
            if token.strip():
                items.append(_parse_scalar(token.strip()))
            elif expect_item and (c == "," or items):
                raise ValueSyntaxError("empty list item")
            token = ""
            pos += 1
            if c == "]":
                return items, pos
            expect_item = True
            continue
        token += c
        pos += 1
    raise ValueSyntaxError("unclosed '['")


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return format_value(value.item())
    if hasattr(value, "tolist"):
        return format_value(value.tolist())
    return str(value)
