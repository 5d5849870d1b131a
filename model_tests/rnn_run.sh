# Sourced by the recurrent model tests' run.sh, from their folder (named as the model, holding
# its trained weights MODEL.pt), with SHAPE (npuopt-export's --input-shape), CHECKS
# (check_report.py's floors) and DECODED (rnn_check.py's floors) set: port the Compass
# Optimizer's plugins from the reference tarball (its KeywordSpotting and Ocr metrics run on
# the models), write the data (../rnn_data.py: synthetic speech features, text images over
# the sample images), export the model with npuopt-export, quantize it with opt.cfg (the
# caller's arguments go to npuopt), check the report and the decoded sequences.
# Needs ../shared beside the repo and the venv's npuopt and npuopt-export on PATH.
set -e
MODEL=$(basename "$PWD")
SHARED=../../../shared
TARBALL=$SHARED/reference/compass_optimizer_4.2.tar.gz
if [ ! -f $SHARED/data/imagenet_sample/labels.tsv ] || [ ! -f $TARBALL ]; then
    echo "SKIP $MODEL: ../shared (data/imagenet_sample, the Compass Optimizer's tarball) is absent"; exit 0
fi
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/..${PYTHONPATH:+:$PYTHONPATH}"
"$PY" ../rnn_models.py data "$MODEL" work
npuopt-export "rnn_models:$MODEL" --weights "$MODEL.pt" --input-shape "$SHAPE" -o "work/$MODEL"
# the ported plugins live outside the repo: they are the reference's code, not the project's
PLUGINS=$(mktemp -d)
tar xzf $TARBALL -C "$PLUGINS" AIPUBuilder/Optimizer/plugins
"$PY" ../../tools/port_opt_plugins.py "$PLUGINS/AIPUBuilder/Optimizer" "$PLUGINS/ported" >/dev/null
status=0
AIPUPLUGIN_PATH="$PLUGINS/ported/plugins:$PWD/../rnn_plugins" npuopt --cfg opt.cfg "$@" || status=$?
rm -rf "$PLUGINS"
[ $status -eq 0 ] || exit $status
# shellcheck disable=SC2086  # CHECKS and DECODED are lists of options
"$PY" ../check_report.py "work/out/${MODEL}_report.json" $CHECKS
cd .. && exec "$PY" rnn_check.py "$MODEL" $DECODED
