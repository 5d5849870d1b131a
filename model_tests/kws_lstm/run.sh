#!/bin/sh
# kws_lstm: keyword spotting with an LSTM over log-mel features of synthetic speech
# (../rnn_data.py, ../rnn_models.py), exported by npuopt-export, quantized with npuopt's
# defaults. Floors (set before measuring): the keyword identical to the float model's on at
# least 98% of the 500 samples; accuracy (float and quantized) at least 95%. Extra
# arguments go to npuopt.
cd "$(dirname "$0")" || exit 1
SHAPE=1,49,20
CHECKS="--min KeywordSpottingMetric=0.95 --min-agreement 0.98"
DECODED="--min-identical 0.98 --min-accuracy 0.95"
. ../rnn_run.sh
