#!/bin/sh
# EfficientNet-Lite0 with fp8 (float8_e4m3fn) quantization: export the pretrained model,
# quantize it with opt.cfg, and check top-1 on the 500 `val` images (float 0.876).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.855 --min-agreement 0.950"
. ../lite0_run.sh
