#!/bin/sh
# Run the op tests: sh op_tests/run.sh [--set FIELD=VALUE ...] [NAME ...]
# (every folder, or the folders named), one PASS/FAIL line per test, then
# "N passed, N failed"; exit 1 if any failed. The --set options override the
# fields of every test's opt.cfg (e.g. --set activation_bits=16).
# Regenerate the folders with: python tools/gen_op_tests.py
cd "$(dirname "$0")" || exit 1
settings=""
while [ "$1" = "--set" ]; do
    if [ $# -lt 2 ]; then
        echo "run.sh: --set needs FIELD=VALUE" >&2; exit 2
    fi
    settings="$settings --set $2"
    shift 2
done
if [ $# -eq 0 ]; then
    set -- $(for s in */run.sh; do dirname "$s"; done)
fi
passed=0
failed=0
for name in "$@"; do
    # shellcheck disable=SC2086  # $settings is a list of options
    last=$(sh run_one.sh "$name" $settings 2>&1 | tail -n 1)
    case "$last" in
        "PASS $name") passed=$((passed + 1)); echo "$last" ;;
        "FAIL $name"*) failed=$((failed + 1)); echo "$last" ;;
        *) failed=$((failed + 1)); echo "FAIL $name: $last" ;;
    esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
