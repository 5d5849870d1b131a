#!/bin/sh
# crnn_ocr: text recognition of 32x128 images (../rnn_data.py: random strings of 3-6 digits
# and letters drawn in DejaVu fonts over the sample images), a CRNN (convolutions, a
# bidirectional LSTM, CTC greedy decoding: ../rnn_models.py) exported by npuopt-export,
# quantized with npuopt's defaults. Floors (set before measuring): the decoded text
# identical to the float model's on at least 95% of the 500 images; accuracy (the exact
# text; float and quantized, OPT's OcrMetric and the decoder's labels) at least 85%. Extra
# arguments go to npuopt.
cd "$(dirname "$0")" || exit 1
SHAPE=1,1,32,128
CHECKS="--min OcrMetric(ch,work/charset.txt,false)=0.85"
DECODED="--min-identical 0.95 --min-accuracy 0.85"
. ../rnn_run.sh
