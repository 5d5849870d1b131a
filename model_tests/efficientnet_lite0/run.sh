#!/bin/sh
# EfficientNet-Lite0: export the pretrained model, quantize it with opt.cfg, and
# print float and quantized top-1 on the 500 `val` images and their agreement.
# Extra arguments go to npuopt (e.g. --set calibration_strategy_for_activation=kld).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.870 --min-agreement 0.982"
. ../lite0_run.sh
