#!/bin/sh
# A YOLOv3-tiny-style detector (its post-processing: Region x2 + RegionFuse + NMS) on pretrained
# EfficientNet-Lite0 blocks, as the tool chain's parser wrote it: quantized with npuopt's
# defaults, it must keep 95% of the float model's boxes on the 500 `val` images
# (BoxAgreementMetric: same class, IoU >= 0.5), the floor set before measuring; the Compass
# Optimizer's YOLOVOCmAPMetric runs beside it. Extra arguments go to npuopt.
cd "$(dirname "$0")" || exit 1
LAYOUT=yolo
CHECKS="--min BoxAgreementMetric(yolo)=0.95"
. ../detector_run.sh
