#!/bin/sh
# One op test: sh op_tests/run_one.sh FOLDER [--set FIELD=VALUE ...]
# Quantizes FOLDER/opt.cfg with npuopt (the IR is FOLDER/NAME.txt, NAME the
# folder's name; the --set options override the cfg's fields), runs npuopt-run
# on the quantized IR with FOLDER's in0.npy, in1.npy, ... as inputs, and
# compares every tensor with npuopt's quantized forward (compare.py).
# Last line: PASS NAME or FAIL NAME: why.
# Needs npuopt and npuopt-run on PATH (the venv); PYTHON picks the interpreter.
cd "$1" || exit 1
shift
name=$(basename "$(pwd)")
inputs=""
i=0
while [ -f "in$i.npy" ]; do
    inputs="$inputs --input in$i.npy"
    i=$((i + 1))
done
rm -rf work && mkdir work
if ! npuopt --cfg opt.cfg "$@" > work/npuopt.log 2>&1; then
    echo "FAIL $name: npuopt: $(tail -n 1 work/npuopt.log)"; exit 1
fi
# shellcheck disable=SC2086  # $inputs is a list of options
if ! npuopt-run "work/${name}_o.txt" $inputs -o work/refrun.npz --dump work/dump 2> work/refrun.log; then
    echo "FAIL $name: $(tail -n 1 work/refrun.log)"; exit 1
fi
# shellcheck disable=SC2086
exec "${PYTHON:-python3}" ../compare.py "$name" "work/${name}_o.txt" work/dump $inputs
