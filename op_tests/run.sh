#!/bin/sh
# Run the op tests (every folder's run.sh, or the folders named as arguments):
# one PASS/FAIL line per test, then "N passed, N failed"; exit 1 if any failed.
# Regenerate the folders with: python tools/gen_op_tests.py
cd "$(dirname "$0")" || exit 1
if [ $# -eq 0 ]; then
    set -- $(for s in */run.sh; do dirname "$s"; done)
fi
passed=0
failed=0
for name in "$@"; do
    last=$(sh "$name/run.sh" 2>&1 | tail -n 1)
    case "$last" in
        "PASS $name") passed=$((passed + 1)); echo "$last" ;;
        "FAIL $name"*) failed=$((failed + 1)); echo "$last" ;;
        *) failed=$((failed + 1)); echo "FAIL $name: $last" ;;
    esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
