#!/bin/sh
# EfficientNet-Lite0 with npuopt's mixed-precision search, at most 6 average weight bits
# (issue 25, acceptance 2): 4- or 8-bit per-channel weights, 8-bit activations, the default
# global calibration; top-1 on the 500 `val` images >= 0.872. 1.5 minutes on 2 cores.
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.872"
. ../lite0_run.sh
