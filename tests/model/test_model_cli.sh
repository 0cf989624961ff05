#!/bin/sh
# test_model_cli.sh - `kvpack model` option handling on stories260K, each run well under a second:
# options the chosen mode would ignore or cannot honour are usage errors (exit 2) with a message
# that names them, before any work: --dump-kv without a scored text, --text/--sample/--generate
# together, --decode-session without --node, --sample 1, a --temp below the float range, and
# --attn fused on a lane it cannot read (naive2, a V window, open rows over one tail page), a
# --codec list past 1023 characters (it was cut at 255, inside a lane's regions). A run past the
# trained context (512) warns; --ref fp32 reports ppl_ref and no ppl_fp16 (it was mislabelled).
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
expect 2 "--keep-session needs --node" --codec oscar --generate Once --keep-session
# --sample 1 used to blame the text ("the text gives fewer than 2 tokens")
expect 2 "--sample wants 2\\.\\." --codec fp16 --sample 1

# a temperature that is 0 as a float used to sample the last vocabulary id every time
expect 2 "--temp wants" --codec fp32 --sample 50 --temp 1e-46
expect 2 "--temp wants" --codec fp32 --sample 50 --temp 1e39
expect 0 "" --codec fp32 --sample 50 --temp 1e-30 --json
# near-greedy sampling from the model itself: a low perplexity (the bug gave 8.2e9)
ppl=$(sed -n 's/.*"ppl_fp16":\([^,]*\),.*/\1/p' "$TMP/out")
awk -v p="$ppl" 'BEGIN { exit !(p + 0 >= 1 && p + 0 < 10) }' ||
    { echo "FAIL: --temp 1e-30 gave ppl_fp16 '$ppl'"; rc=1; }

# --attn fused refuses, before any step, lanes it cannot run (naive2 used to fail at position P
# with exit 1; open rows over one fp16 tail page at position 4096, and a shorter text passed):
T="--text $R/emma.txt --tokens 300"
expect 2 "lane naive2 has no fused attention" --codec naive2 $T --attn fused
expect 2 "lane oscar@r4096 holds up to 4112 open rows" --codec oscar@r4096 --page-tokens 16 $T \
    --attn fused
expect 2 "lane oscar@e8192 holds up to 8192 open rows" --codec oscar@e8192 --page-tokens 4096 \
    $T --attn fused
expect 2 "lane kivi keeps a V window" --codec kivi $T --attn fused
# at the limit: residual + batch = 4096 rows is one tail page
expect 0 "" --codec oscar@r4080 --page-tokens 16 $T --attn fused
# --codec all under --attn fused is every codec that has it: naive2 is left out, with a note
expect 0 "leaves out naive2" --codec all --regions bare $T --attn fused --json
if ! grep -q '"codec":"oscar@bare"' "$TMP/out" || grep -q '"codec":"naive2' "$TMP/out"; then
    echo "FAIL: --codec all --attn fused lanes:"; cat "$TMP/out"; rc=1
fi

LONG=$(python3 -c 'print(",".join(["kivi@s1r120e128v128"] * 60))')
expect 2 "codec list of 1199 characters" --codec "$LONG" $T
expect 0 "run past stories260K.bin's trained context of 512" --codec kivi --text "$R/emma.txt" \
    --tokens 520
expect 0 "" --codec kivi --ref fp32 $T --json
if ! grep -q '"reference":"fp32","ppl_ref":' "$TMP/out" || grep -q '"ppl_fp16"' "$TMP/out"; then
    echo "FAIL: --ref fp32 --json:"; cat "$TMP/out"; rc=1
fi

[ $rc -eq 0 ] && echo "test_model_cli: all checks passed"
exit $rc
