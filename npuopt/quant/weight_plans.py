"""What global calibration methods plan for a layer's weights (their rounding, their
grid's range, the float biases that fit that rounding best), kept in the float graph's
layer attrs with the grid settings they were planned for. A plan holds on that grid
only: GPTQ's 4-bit integers read on the 16-bit grid the naive mixed-precision search
gives a layer afterwards are values 2^12 times too small (the parser's mobilenet_v2
then output zeros); on another grid the weights take their calibrated range and
nearest rounding, and the layer its float biases, as a fresh run with that grid would."""
from typing import Optional

import torch

from .settings import settings_of

PLANNED_ATTRS = ("planned_integers", "planned_ranges", "planned_biases")  # the layer attrs that hold them


def grid_settings(node) -> tuple:
    """The settings that make a layer's weight grid."""
    st = settings_of(node)
    method = st.quantize_method_for_weight
    return st.weights_format, st.weight_bits, str(method), st.weight_block_size if method.per_block else None


def planned(node, attr: str, key: str):
    """The plan (`attr`: one of PLANNED_ATTRS) for constant `key` on the layer's current grid, or None."""
    entry = node.attrs.get(attr, {}).get(key)
    return entry[1] if entry is not None and entry[0] == grid_settings(node) else None


def set_planned(node, attr: str, key: str, value) -> None:
    """Plan `value` for constant `key` on the layer's current grid (None: no plan)."""
    if value is None:
        node.attrs.get(attr, {}).pop(key, None)
    else:
        node.attrs.setdefault(attr, {})[key] = (grid_settings(node), value)


def planned_keys(node, attr: str) -> list:
    """The constants with a plan in `attr` that holds on the layer's current grid."""
    return [key for key in node.attrs.get(attr, {}) if planned(node, attr, key) is not None]


def held_values(node, attr: str) -> list:
    """Every plan the layer holds in `attr`, on whatever grid it was made for."""
    return [value for _, value in node.attrs.get(attr, {}).values()]


def has_stale_plans(node) -> bool:
    """Whether the layer holds plans made for a grid it no longer has."""
    return any(entry[0] != grid_settings(node) for attr in PLANNED_ATTRS for entry in node.attrs.get(attr, {}).values())


def plan_biases(node, biases) -> None:
    """A global calibration method's float biases for the layer (the best for the weights'
    planned rounding), used by the quantized graph instead of the float graph's, which
    stay what the model computes in float (None: back to those)."""
    set_planned(node, "planned_biases", "biases", None if biases is None else biases.detach().cpu())


def biases_of(node) -> Optional[torch.Tensor]:
    """The float biases the quantized layer will start from: the planned ones, or the float graph's."""
    b = planned(node, "planned_biases", "biases")
    if b is None and "biases" in node.constants:
        b = node.constants["biases"].betensor
    return b


def use_planned_biases(node) -> None:
    """In a quantized copy of a layer whose weights are quantized, before its quantize
    function runs: the planned biases in place of the float graph's (the copy's constant
    takes a new tensor; a layer kept in float with float weights keeps the float ones)."""
    b = planned(node, "planned_biases", "biases") if settings_of(node).weights_quantized else None
    c = node.constants.get("biases")
    if b is not None and c is not None:
        c.betensor = b.reshape(c.betensor.shape).to(c.betensor.device, c.betensor.dtype)
