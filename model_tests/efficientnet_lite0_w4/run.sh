#!/bin/sh
# EfficientNet-Lite0 with 4-bit weights: export the pretrained model, quantize it
# with opt.cfg (4-bit per-channel asymmetric weights, 8-bit asymmetric activations,
# AdaRound; 3-5 minutes on 2 cores), and check top-1 on the 500 `val` images (float
# 0.876). `--set quantize_method_for_weight=per_channel_symmetric_restricted_range`
# shows the 15-level symmetric grid instead (0.826 measured). Extra arguments go to
# npuopt. Needs ../shared beside the repo and the venv's npuopt/npuopt-export on PATH.
set -e
cd "$(dirname "$0")"
if [ ! -f ../../../shared/data/imagenet_sample/labels.tsv ]; then
    echo "SKIP efficientnet_lite0_w4: ../shared/data/imagenet_sample is absent"; exit 0
fi
mkdir -p work
[ -f work/lite0.txt ] || npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o work/lite0
npuopt --cfg opt.cfg "$@"
exec "${PYTHON:-python3}" ../check_report.py work/out/lite0_report.json --min TopKMetric=0.840 --min-agreement 0.920
