#!/bin/sh
# test_model_cli.sh - `kvpack model` option handling on stories260K, each run well under a second:
# options the chosen mode would ignore or cannot honour are usage errors (exit 2) with a message
# that names them, before any work: --dump-kv without a scored text, --text/--sample/--generate
# together, --decode-session without --node, --sample 1, a --temp below the float range.
# Usage: test_model_cli.sh KVPACK REALDATA_DIR. Exit 77 when the real data is absent.
set -u
K=$1
R=$2
if [ ! -r "$R/stories260K.bin" ] || [ ! -r "$R/tok512.bin" ] || [ ! -r "$R/emma.txt" ]; then
    echo "SKIP: no stories260K.bin / tok512.bin / emma.txt in $R"
    exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rc=0

# expect WANT_RC STDERR_PATTERN ARGS...: kvpack model on stories260K must exit WANT_RC and, when
# the pattern is not empty, say it on stderr (stdout in $TMP/out, stderr in $TMP/err)
expect() {
    want=$1
    pat=$2
    shift 2
    "$K" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" "$@" \
        >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ $got -ne "$want" ] || { [ -n "$pat" ] && ! grep -q -e "$pat" "$TMP/err"; }; then
        echo "FAIL: kvpack model $* -> exit $got (want $want${pat:+, stderr with '$pat'}):"
        cat "$TMP/err"
        rc=1
    fi
}

# --dump-kv is only written for a scored text: with --generate it used to be dropped, exit 0
expect 2 "--dump-kv needs --text or --sample" --codec fp16 --generate Once --steps 4 \
    --dump-kv "$TMP/gen.kvd"
[ ! -e "$TMP/gen.kvd" ] || { echo "FAIL: a refused run wrote $TMP/gen.kvd"; rc=1; }
expect 0 "wrote 16 tokens" --codec fp16 --text "$R/emma.txt" --tokens 16 --dump-kv "$TMP/t.kvd"
[ -s "$TMP/t.kvd" ] || { echo "FAIL: --text --dump-kv wrote no file"; rc=1; }

# one mode per run: the others used to be silently ignored
expect 2 "exclude each other" --codec fp16 --text "$R/emma.txt" --sample 20
expect 2 "exclude each other" --codec fp16 --text "$R/emma.txt" --generate Once
expect 2 "exclude each other" --codec fp16 --sample 20 --generate Once
# the decode role without a node used to say "--node needs --generate PROMPT"
expect 2 "--decode-session needs --node" --codec oscar --decode-session x --generate Once
expect 2 "--node needs --generate" --codec oscar --node 127.0.0.1:1 --text "$R/emma.txt"
# --sample 1 used to blame the text ("the text gives fewer than 2 tokens")
expect 2 "--sample takes 2\\.\\." --codec fp16 --sample 1

# a temperature that is 0 as a float used to sample the last vocabulary id every time
expect 2 "--temp takes" --codec fp32 --sample 50 --temp 1e-46
expect 2 "--temp takes" --codec fp32 --sample 50 --temp 1e39
expect 0 "" --codec fp32 --sample 50 --temp 1e-30 --json
# near-greedy sampling from the model itself: a low perplexity (the bug gave 8.2e9)
ppl=$(sed -n 's/.*"ppl_fp16":\([^,]*\),.*/\1/p' "$TMP/out")
awk -v p="$ppl" 'BEGIN { exit !(p + 0 >= 1 && p + 0 < 10) }' ||
    { echo "FAIL: --temp 1e-30 gave ppl_fp16 '$ppl'"; rc=1; }

[ $rc -eq 0 ] && echo "test_model_cli: all checks passed"
exit $rc
