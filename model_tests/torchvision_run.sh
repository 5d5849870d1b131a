# Sourced by the torchvision model tests' run.sh, from their folder (named as the
# torchvision model), with CHECKS set (check_report.py's floors): export the model with
# npuopt-export (random weights from torch.manual_seed(0)), run npuopt on the folder's
# opt.cfg (calibrate, quantize, measure; prints the report's figures; the caller's
# arguments go to npuopt, e.g. --set device=cpu), check the report, then compare
# npuopt's float forward of the IR with PyTorch on 8 random inputs and 8 images, as
# loaded and after lively() (../float_check.py).
# Needs ../shared beside the repo and the venv's npuopt/npuopt-export on PATH.
set -e
MODEL=$(basename "$PWD")
if [ ! -f ../../../shared/data/imagenet_sample/labels.tsv ]; then
    echo "SKIP $MODEL: ../shared/data/imagenet_sample is absent"; exit 0
fi
mkdir -p work
npuopt-export "torchvision:$MODEL" --input-shape 1,3,224,224 -o "work/$MODEL"
npuopt --cfg opt.cfg "$@"
# shellcheck disable=SC2086  # CHECKS is a list of options
"${PYTHON:-python3}" ../check_report.py "work/out/${MODEL}_report.json" $CHECKS
exec "${PYTHON:-python3}" ../float_check.py "$MODEL" "work/$MODEL" --lively
