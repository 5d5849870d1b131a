#!/bin/sh
# Op test constant: quantize with npuopt, run npuopt-run on the quantized IR, and
# compare every tensor with npuopt's quantized forward. Prints PASS/FAIL constant.
# Needs npuopt and npuopt-run on PATH (the venv); PYTHON picks the interpreter.
cd "$(dirname "$0")" || exit 1
rm -rf work && mkdir work
if ! npuopt --cfg opt.cfg > work/npuopt.log 2>&1; then
    echo "FAIL constant: npuopt: $(tail -n 1 work/npuopt.log)"; exit 1
fi
if ! npuopt-run work/constant_o.txt --input in0.npy -o work/refrun.npz --dump work/dump 2> work/refrun.log; then
    echo "FAIL constant: $(tail -n 1 work/refrun.log)"; exit 1
fi
exec "${PYTHON:-python3}" ../compare.py constant work/constant_o.txt work/dump --input in0.npy
