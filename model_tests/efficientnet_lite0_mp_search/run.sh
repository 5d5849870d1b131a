#!/bin/sh
# EfficientNet-Lite0 with npuopt's mixed-precision search (issue 25, acceptance 2): 4- or
# 8-bit per-channel weights, 8-bit activations, at most 4.5 average weight bits, the default
# global calibration; top-1 on the 500 `val` images >= 0.866 (uniform 4-bit weights with
# AdaRound: 0.850, efficientnet_lite0_w4). 1.5 minutes on 2 cores; the front and its plot are written beside
# the IR (work/out/lite0_mixed_precision.json, .png).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.866"
. ../lite0_run.sh
