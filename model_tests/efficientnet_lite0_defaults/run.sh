#!/bin/sh
# EfficientNet-Lite0 with the defaults: export the pretrained model, quantize it
# with opt.cfg (data only), and check top-1 on the 500 `val` images (float 0.876)
# and its agreement with the float model. `--set global_calibration=none` shows
# the defaults without GPTQ (0.856 measured). Extra arguments go to npuopt.
# Needs ../shared beside the repo and the venv's npuopt/npuopt-export on PATH.
set -e
cd "$(dirname "$0")"
if [ ! -f ../../../shared/data/imagenet_sample/labels.tsv ]; then
    echo "SKIP efficientnet_lite0_defaults: ../shared/data/imagenet_sample is absent"; exit 0
fi
mkdir -p work
[ -f work/lite0.txt ] || npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o work/lite0
npuopt --cfg opt.cfg "$@"
exec "${PYTHON:-python3}" ../check_report.py work/out/lite0_report.json --min TopKMetric=0.860 --min-agreement 0.975
