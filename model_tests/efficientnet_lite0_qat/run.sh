#!/bin/sh
# EfficientNet-Lite0 fine-tuned through its exact 4-bit grids (issue 26): export the
# pretrained model, quantize it with opt.cfg (4-bit per-channel asymmetric weights, 8-bit
# asymmetric activations, the default global calibration, then fine-tuning on the 500
# unlabeled `calib` images distilled from the float logits), and check top-1 on the 500
# `val` images (float 0.876). Extra arguments go to npuopt (--set device=cuda on a GPU).
cd "$(dirname "$0")" || exit 1
CHECKS="--min TopKMetric=0.870 --min-agreement 0.960"
. ../lite0_run.sh
