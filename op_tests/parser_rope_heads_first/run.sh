#!/bin/sh
# Op test parser_rope_heads_first: quantize with npuopt, run npuopt-run on the quantized IR, and
# compare every tensor with npuopt's quantized forward (op_tests/run_one.sh).
exec sh "$(dirname "$0")/../run_one.sh" "$(dirname "$0")"
