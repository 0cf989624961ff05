#!/usr/bin/env bash
# check_help.sh - every kvpack subcommand and kvpackd answer --help with a usage text and exit 0,
# and an unknown option is a usage error (exit 2), never a crash.
set -u
kvpack=$1; kvpackd=$2; fail=0
for cmd in demo serve stat put get ls rm repair nodes eval model loadtest plan "bench codec" "bench store" "bench node" "bench transfer" "bench stream"; do
  out=$($kvpack $cmd --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -qi usage <<<"$out"; then echo "FAIL: kvpack $cmd --help (rc $rc)"; fail=1; fi
  $kvpack $cmd --no-such-option >/dev/null 2>&1; rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL: kvpack $cmd --no-such-option gave rc $rc, want 2"; fail=1; fi
done
out=$($kvpackd --help 2>&1); rc=$?
if [ $rc -ne 0 ] || ! grep -qi usage <<<"$out"; then echo "FAIL: kvpackd --help (rc $rc)"; fail=1; fi
$kvpack no-such-command >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: unknown command not rc 2"; fail=1; }
[ $fail -eq 0 ] && echo "check_help: all subcommands answer --help"
exit $fail
