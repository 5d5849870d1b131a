#!/bin/sh
# EfficientNet-Lite0 with 16-bit activations and weights and 48-bit biases: export the
# pretrained model, quantize it with opt.cfg (about 2 minutes on 2 cores: 16-bit
# products are summed in float64), and check top-1 on the 500 `val` images (float
# 0.876) and the agreement with float. Extra arguments go to npuopt (e.g.
# --set remain_shift=20 for the chip's ahead shift).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.874 --min-agreement 0.995"
. ../lite0_run.sh
