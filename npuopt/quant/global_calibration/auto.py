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

Where fine-tuning follows (the cfg sets `train_data`), the layers with integer weights
below 8 bits get AdaRound's roundings instead: fine-tuning starts from them. Measured on
Lite0 with 4-bit per-channel weights (trained on calib[0:400], relative output error on
calib[400:500]): from GPTQ 0.175 before and 0.160 after 3 epochs, from AdaRound 0.111 and
0.108; on val (the model test, all 500 calib images) 0.834 and 0.856 top-1.

It needs the calibration data: a run with a statistic_file and no calibration_data
keeps nearest rounding and says so.
"""
import dataclasses

from ...errors import ConfigError
from ...logger import OPT_WARN
from ..settings import settings_of
from . import global_calibration
from ._layers import rounded_layers
from .adaround import adaround
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


def below_8_bits(node) -> bool:
    """Integer weights below 8 bits: the layers AdaRound rounds where fine-tuning follows."""
    st = settings_of(node)
    return st.weights_format == "int" and st.weight_bits < 8


def _within(ctx, scope):
    outer = ctx.scope
    return dataclasses.replace(ctx, scope=lambda node: scope(node) and (outer is None or outer(node)))


@global_calibration("auto", "after_calibration", edits_float=False, data_parallel=True)
def auto(ctx, params) -> None:
    """npuopt's default: gptq_zy on the layers whose weights are per tensor or below 8 bits
    (adaround on integer weights below 8 bits where fine-tuning follows)."""
    if params:
        raise ConfigError("field 'global_calibration': auto takes no params")
    ctx = _within(ctx, coarse)
    if not rounded_layers(ctx, minifloat=True):
        return
    if not ctx.has_data:
        OPT_WARN("global_calibration 'auto': no calibration_data to run GPTQ on, so weights keep nearest rounding "
                 "(set global_calibration = none to silence this)")
        return
    if ctx.field_of("train_data", None):
        adaround(_within(ctx, below_8_bits), [])
        ctx.plan.forget()  # it set float biases (the run kept the float model first: OptMaster.global_calibration)
        ctx = _within(ctx, lambda node: not below_8_bits(node))
    gptq_zy(ctx, [])
