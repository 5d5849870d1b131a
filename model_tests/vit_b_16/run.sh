#!/bin/sh
# vit_b_16 (torchvision, random weights from torch.manual_seed(0)): export it with
# npuopt-export, run npuopt on opt.cfg (calibrate, quantize, measure; prints the
# report's figures), then compare npuopt's float forward of the IR with PyTorch on
# 8 random inputs and 8 images, as loaded and after lively() (../float_check.py).
# Extra arguments go to npuopt (e.g. --set device=cpu).
# Needs ../shared beside the repo and the venv's npuopt/npuopt-export on PATH.
set -e
cd "$(dirname "$0")"
if [ ! -f ../../../shared/data/imagenet_sample/labels.tsv ]; then
    echo "SKIP vit_b_16: ../shared/data/imagenet_sample is absent"; exit 0
fi
mkdir -p work
npuopt-export torchvision:vit_b_16 --input-shape 1,3,224,224 -o work/vit_b_16
npuopt --cfg opt.cfg "$@"
"${PYTHON:-python3}" ../check_report.py work/out/vit_b_16_report.json --min-median-cosine 0.997
exec "${PYTHON:-python3}" ../float_check.py vit_b_16 work/vit_b_16 --lively
