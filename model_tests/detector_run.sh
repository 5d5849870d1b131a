# Sourced by the detector model tests' run.sh, from their folder (named as the model, holding
# its parser-written float IR), with LAYOUT (BoxAgreementMetric's: ssd or yolo) and CHECKS
# (check_report.py's floors) set: port the Compass Optimizer's plugins from the reference
# tarball (its VOC dataset and mAP metrics run on the model), write the images and the float
# model's detections on them as box labels (detector_data.py), quantize with opt.cfg (the
# caller's arguments go to npuopt) and check the report.
# Needs ../shared beside the repo and the venv's npuopt on PATH.
set -e
MODEL=$(basename "$PWD")
SHARED=../../../shared
TARBALL=$SHARED/reference/compass_optimizer_4.2.tar.gz
if [ ! -f $SHARED/data/imagenet_sample/labels.tsv ] || [ ! -f $TARBALL ]; then
    echo "SKIP $MODEL: ../shared (data/imagenet_sample, the Compass Optimizer's tarball) is absent"; exit 0
fi
PY=${PYTHON:-python3}
# the ported plugins live outside the repo: they are the reference's code, not the project's
PLUGINS=$(mktemp -d)
tar xzf $TARBALL -C "$PLUGINS" AIPUBuilder/Optimizer/plugins
"$PY" ../../tools/port_opt_plugins.py "$PLUGINS/AIPUBuilder/Optimizer" "$PLUGINS/ported" >/dev/null
"$PY" ../detector_data.py "$MODEL.txt" "$LAYOUT" work
status=0
AIPUPLUGIN_PATH="$PLUGINS/ported/plugins" npuopt --cfg opt.cfg "$@" || status=$?
rm -rf "$PLUGINS"
[ $status -eq 0 ] || exit $status
# shellcheck disable=SC2086  # CHECKS is a list of options
exec "$PY" ../check_report.py "work/out/${MODEL}_report.json" $CHECKS
