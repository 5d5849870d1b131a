"""npuopt's default global calibration (`global_calibration = auto`, the field's
default): GPTQ with its default params (gptq.py) on the layers whose weight grid is
coarse, that is, quantized per tensor (a depthwise layer's small channels then get a
few integer steps), to fewer than 8 bits, or to fp4; layers with 8-bit (or wider) per-channel
weights keep nearest rounding, which loses next to nothing there.

Measured on EfficientNet-Lite0 (100 calibration images, 500 val, 2 CPU cores): the
cfg's defaults (per-tensor symmetric 8-bit) give top-1 0.856 with nearest rounding,
0.876 with this (about 35 s more); 4-bit per-channel weights 0.112 and 0.826. Other
ways tried on the defaults stayed within a few images of 0.860 (README, "Global
calibration"). `global_calibration = none` turns it off.

It needs the calibration data: a run with a statistic_file and no calibration_data
keeps nearest rounding and says so.
"""
import dataclasses

from ...errors import ConfigError
from ...logger import OPT_WARN
from ..settings import settings_of
from . import global_calibration
from ._layers import rounded_layers
from .gptq import gptq_zy


def coarse(node) -> bool:
    """Whether the layer's weights are on a per-tensor integer grid, fewer than 8 bits or fp4
    (fp8 weights, 3 or 2 bits of mantissa under any scale, are not: GPTQ changed
    transformer_encoder's fp8 output cosine from 0.99899 to 0.99890)."""
    st = settings_of(node)
    method = st.quantize_method_for_weight
    if st.weights_format != "int":
        return st.weights_format.startswith("float4")
    return not (method.per_channel or method.per_block) or st.weight_bits < 8


@global_calibration("auto", "after_calibration", edits_float=False, data_parallel=True)
def auto(ctx, params) -> None:
    """npuopt's default: gptq_zy on the layers whose weights are per tensor or below 8 bits."""
    if params:
        raise ConfigError("field 'global_calibration': auto takes no params")
    outer = ctx.scope
    ctx = dataclasses.replace(ctx, scope=lambda node: coarse(node) and (outer is None or outer(node)))
    if not rounded_layers(ctx, minifloat=True):
        return
    if not ctx.has_data:
        OPT_WARN("global_calibration 'auto': no calibration_data to run GPTQ on, so weights keep nearest rounding "
                 "(set global_calibration = none to silence this)")
        return
    gptq_zy(ctx, [])
