#!/bin/sh
# googlenet (torchvision, random weights): ../torchvision_run.sh exports it, quantizes it
# with opt.cfg and checks the report and the float forward. Extra arguments go to npuopt.
cd "$(dirname "$0")" || exit 1
CHECKS="--min-median-cosine 0.999"
. ../torchvision_run.sh
