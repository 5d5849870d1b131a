#!/bin/sh
# EfficientNet-Lite0 (pretrained), the float check of issue 3: export it with
# npuopt-export and compare npuopt's float forward of the IR with PyTorch on 8
# random inputs and 8 sample images (../float_check.py). run.sh beside it quantizes.
# Needs the venv's npuopt-export on PATH; the images part needs ../shared.
set -e
cd "$(dirname "$0")"
mkdir -p work
npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o work/float/lite0
exec "${PYTHON:-python3}" ../float_check.py efficientnet_lite0 work/float/lite0
