"""Small text helpers by the Compass Optimizer's names."""
import datetime

__all__ = ["list_any_to_str", "timestamp_string", "string_to_base_type", "ds_expr_eval"]


def list_any_to_str(values) -> str:
    """A (nested) list as the IR writes it: [1,2,3] -> '1,2,3', [[1,2],[3]] -> '[1,2],[3]'."""
    if not isinstance(values, (list, tuple)):
        return str(values)
    parts = [f"[{list_any_to_str(v)}]" if isinstance(v, (list, tuple)) else str(v) for v in values]
    return ",".join(parts)


def timestamp_string() -> str:
    return datetime.datetime.now().strftime("%Y%m%d%H%M%S")


def string_to_base_type(s: str):
    """'3' -> 3, '0.5' -> 0.5, 'true'/'false' -> bool, anything else unchanged."""
    text = str(s).strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return s


def ds_expr_eval(exprs, argvs: dict):
    """A dynamic-shape expression (or a list of them) evaluated with the symbols of
    `argvs` substituted: numbers stay as they are, strings are arithmetic expressions."""
    if isinstance(exprs, (list, tuple)):
        return [ds_expr_eval(e, argvs) for e in exprs]
    if not isinstance(exprs, str):
        return exprs
    text = exprs
    for symbol, value in argvs.items():
        text = text.replace(str(symbol), str(value))
    return eval(text, {"__builtins__": {}}, {"min": min, "max": max, "abs": abs})  # arithmetic only
