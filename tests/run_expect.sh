#!/bin/sh
# run_expect.sh - a CLI smoke run for ctest: CMD ARGS... must exit 0 and print PATTERN (grep -E)
# on stdout. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status, and the bench and eval
# commands print their JSON keys even when a codec failed (they exit 1 after), so that passed.
# Usage: run_expect.sh PATTERN CMD [ARGS...]
set -u
pat=$1
shift
out=$("$@")
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
    echo "FAIL: $* exited $rc"
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -e "$pat"; then
    echo "FAIL: $* printed no '$pat'"
    exit 1
fi
