#!/bin/sh
# EfficientNet-Lite0 with 4-bit per-block weight-only quantization: export the pretrained
# model, quantize it with opt.cfg, and check top-1 on the 500 `val` images (float 0.876).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.870"
. ../lite0_run.sh
