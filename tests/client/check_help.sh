#!/usr/bin/env bash
# check_help.sh - every kvpack subcommand and kvpackd answer --help with a usage text and exit 0,
# and an unknown option is a usage error (exit 2), never a crash; kvpack --version and kvpackd
# --version print the project version (CMakeLists.txt) and exit 0.
# usage: check_help.sh KVPACK KVPACKD VERSION
set -u
kvpack=$1; kvpackd=$2; version=$3; fail=0
for cmd in demo serve stat put get ls rm repair scrub nodes eval model loadtest plan "bench codec" \
           "bench store" "bench node" "bench transfer" "bench stream" "bench attn"; do
  out=$($kvpack $cmd --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -qi usage <<<"$out"; then echo "FAIL: kvpack $cmd --help (rc $rc)"; fail=1; fi
  $kvpack $cmd --no-such-option >/dev/null 2>&1; rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL: kvpack $cmd --no-such-option gave rc $rc, want 2"; fail=1; fi
done
out=$($kvpackd --help 2>&1); rc=$?
if [ $rc -ne 0 ] || ! grep -qi usage <<<"$out"; then echo "FAIL: kvpackd --help (rc $rc)"; fail=1; fi
for bin in "$kvpack" "$kvpackd"; do
  out=$($bin --version 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^kvpack[d]* $version (page format v1, wire v1)$" <<<"$out"; then
    echo "FAIL: $bin --version (rc $rc): $out"; fail=1
  fi
done
$kvpack no-such-command >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: unknown command not rc 2"; fail=1; }
[ $fail -eq 0 ] && echo "check_help: all subcommands answer --help"
exit $fail
