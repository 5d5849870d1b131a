#!/bin/sh
# EfficientNet-Lite0 with OPT's mixed_precision_auto_search = 2,0.01,L: the drop on the 500
# `val` images within the threshold plus 0.01 (float 0.876: top-1 >= 0.856).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.856"
. ../lite0_run.sh
