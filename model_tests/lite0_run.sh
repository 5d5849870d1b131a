# Sourced by the EfficientNet-Lite0 run.sh scripts, from their folder, with CHECKS set
# (check_report.py's floors): export the pretrained model into work/ once, quantize it
# with the folder's opt.cfg (the caller's arguments go to npuopt), and check the report.
# Needs ../shared beside the repo and the venv's npuopt/npuopt-export on PATH.
set -e
if [ ! -f ../../../shared/data/imagenet_sample/labels.tsv ]; then
    echo "SKIP $(basename "$PWD"): ../shared/data/imagenet_sample is absent"; exit 0
fi
mkdir -p work
[ -f work/lite0.txt ] || npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o work/lite0
npuopt --cfg opt.cfg "$@"
# shellcheck disable=SC2086  # CHECKS is a list of options
exec "${PYTHON:-python3}" ../check_report.py work/out/lite0_report.json $CHECKS
