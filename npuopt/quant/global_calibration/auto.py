"""npuopt's default global calibration (`global_calibration = auto`, the field's
default): GPTQ (gptq.py), damped more than gptq_zy's default (DAMPING), on the layers
whose weight grid is coarse, that is, quantized per tensor (a depthwise layer's small
channels then get a few integer steps), to fewer than 8 bits, or to a minifloat format
(fp8's 2 or 3 bits of mantissa, fp4); layers with 8-bit (or wider) per-channel integer
weights keep nearest rounding, which loses next to nothing there.

Measured on EfficientNet-Lite0 (100 calibration images, 500 val, 2 CPU cores): the
cfg's defaults (per-tensor symmetric 8-bit) give top-1 0.856 with nearest rounding,
0.872 with this (about 35 s more); 4-bit per-channel asymmetric weights 0.142 and 0.850.
`global_calibration = none` turns it off.

It needs the calibration data: a run with a statistic_file and no calibration_data
keeps nearest rounding and says so.
"""
import dataclasses

from ...errors import ConfigError
from ...logger import OPT_WARN
from ..settings import settings_of
from . import global_calibration
from ._layers import rounded_layers
from ._params import read_params
from .gptq import PARAMS, run_gptq


def coarse(node) -> bool:
    """Whether the layer's weights are on a per-tensor integer grid, fewer than 8 bits or a
    minifloat format (fp8, fp4)."""
    st = settings_of(node)
    method = st.quantize_method_for_weight
    return st.weights_format != "int" or not (method.per_channel or method.per_block) or st.weight_bits < 8


# GPTQ's damping here: 1.0 times H's mean diagonal (gptq_zy's own default, OPT's, is 0.01).
# Chosen on EfficientNet-Lite0's 400 calib images not used to calibrate (top-1 / agreement with
# float, 8-bit per-tensor weights and 4-bit per-channel asymmetric weights with 8-bit activations):
# damping 0.01: 0.8625 / 97.5%, 0.825 / 91.25%; 0.1: 0.870 / 97.0%, 0.8275 / 91.25%; 0.3: 0.870 /
# 98.0%, 0.8325 / 91.25%; 0.5: 0.875 / 98.25%, 0.8275 / 91.5%; 1.0: 0.865 / 98.5%, 0.8525 / 92.25%.
# The 100 calibration images give H too few patches to trust its small directions, and the
# error fed forward through them overshoots. Then on `val` (500): 0.866 / 97.6% -> 0.872 / 97.4%,
# 0.820 / 90.8% -> 0.850 / 94.0% (AdaRound: 0.850 / 93.8%, in 120 s against 35 s); transformer_encoder's
# output cosine rose under every format tried (int8 0.99924 -> 0.99929, 4-bit 0.99835 -> 0.99857,
# weight-only int4 blocks 0.99957 -> 0.99959, fp4 blocks 0.99872 -> 0.99881).
DAMPING = 1.0
# fp8 weights are rounded too since 2026-12-01: at gptq_zy's damping 0.01 GPTQ had lowered
# transformer_encoder's fp8 output cosine (0.99899 -> 0.99890); at this damping it raises it
# under every fp8 form (its 64 calibration / 16 other samples): e4m3 0.999004 -> 0.999065, e4m3
# with per-channel weights 0.999011 -> 0.999081, e5m2 0.998061 -> 0.998381, weight-only fp8
# blocks of 32 0.999851 -> 0.999937. On Lite0's 400 held-out calib images (top-1 / agreement /
# mean output cosine; per-channel fp8 weights): e4m3 0.8425 / 90.25% / 0.9702 -> 0.8575 / 95.0%
# / 0.9907 (0.8375 / 93.0% / 0.9815 at damping 0.01), e5m2 0.780 / 81.75% / 0.874 -> 0.820 /
# 87.5% / 0.967.
# A weight-only layer's rounding is chosen with, and planned with, the biases that fit it best
# on the calibration data (its biases stay float in the IR; gptq_zy, as OPT's, keeps the float
# biases). On the same 400 held-out images (top-1 / agreement / mean output cosine to float),
# 4-bit weight-only blocks of 32: 0.8625 / 94.25% / 0.96629 -> 0.865 / 96.0% / 0.97183, and on
# `val` 0.868 / 94.6% -> 0.872 / 95.2%. Integer layers keep the float biases: there the held-out
# figures were mixed (4-bit per-channel asymmetric 0.830 / 90.75% / 0.94261 -> 0.8375 / 91.75% /
# 0.94748; the 8-bit per-tensor defaults 0.865 / 98.5% / 0.99456 -> 0.8675 / 97.5% / 0.99522;
# the 4.5-bit mixed-precision search 0.8575 / 94.25% / 0.96855 -> 0.865 / 94.0% / 0.96826) and
# `val` lost (defaults 0.872 -> 0.868; the search at 4.5 bits 0.868 -> 0.852, at 6 bits 0.876 -> 0.862).

# Tried on 4-bit weight-only blocks of 32 and not kept (2026-12-01/02; Lite0, the 400 held-out calib
# images `labels.tsv:calib:100-`; top-1 / agreement / mean output cosine / mean KL(float || quantized)
# of the softmax; the default: 0.865 / 95.0% / 0.97125 / 0.0483): coordinate descent on each layer's
# error after GPTQ 0.855 / 94.0% / 0.97270 / 0.0470; damping 0.01 on the layers whose H has 80 patches
# per input or more (the first ones and the depthwise ones) and each channel's range ends chosen with
# GPTQ's rounding 0.860 / 96.25% / 0.97359 / 0.0433 (seven shares of each end: 0.8475 / 95.0% / 0.97426
# / 0.0386); damping 20 K / P (P patches, K inputs; at most 1) 0.855 / 95.25% / 0.97309 / 0.0409; H also
# from the images flipped 0.8525 / 95.0% / 0.97041 / 0.0516; GPTQ's target W x_q instead of W x_f
# 0.845 / 89.75% / 0.94490; FullyConnected (H of low rank) damped by each input's power 0.8575 / 94.5%
# / 0.97081 / 0.0490; nearest rounding for FullyConnected 0.8625 / 94.5% / 0.97154 / 0.0479. Lower KL
# came with lower top-1: 400 images tell these apart by a few near ties. Alone (the other layers 8-bit),
# 4-bit FullyConnected weights cost 2.5% of the agreement (KL 0.005), the stem and the first block
# 4.75%, the depthwise layers 3.75%.
# Each block's range share chosen first (gptq_zy's choose_range, 2026-12-05), on per-block layers only:
# Lite0 4-bit weight-only blocks of 32 on the 400 held-out images 0.865 -> 0.855; SmolLM2-135M 4-bit
# blocks of 128 (bench_llm's 16 calibration and 16 evaluation windows) perplexity +7.83% -> +7.66% of
# float. Not kept: the CNN lost more than the decoder gained.


@global_calibration("auto", "after_calibration", edits_float=False, data_parallel=True)
def auto(ctx, params) -> None:
    """npuopt's default: GPTQ, damped (with the best biases on weight-only layers), on the layers
    whose weights are per tensor or below 8 bits."""
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
    run_gptq(ctx, read_params("auto", [0, 1, DAMPING], PARAMS), free_bias=lambda node: settings_of(node).weight_only)
