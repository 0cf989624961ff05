#!/bin/sh
# test_model_node.sh - `kvpack model --node` end to end: start a real kvpackd on loopback, prefill
# stories260K in one kvpack process, streaming its pages to the node as they seal (kvp_put_stream:
# several pushes for the 3-chunk oscar@s1 case), decode in a second process that
# fetches them, and require the fetched decode to equal the in-process one (for two codecs, and
# for oscar behind an fp16 sink chunk).
# Usage: test_model_node.sh BIN_DIR REALDATA_DIR. Exit 77 when the real data is absent.
set -u
BIN=$1
R=$2
if [ ! -r "$R/stories260K.bin" ] || [ ! -r "$R/tok512.bin" ]; then
    echo "SKIP: no stories260K.bin / tok512.bin in $R"
    exit 77
fi
TMP=$(mktemp -d)
export UCX_TCP_CM_REUSEADDR=y UCX_NET_DEVICES=lo
"$BIN/kvpackd" --listen 127.0.0.1:0 --ready-file "$TMP/port" >"$TMP/kvpackd.log" 2>&1 &
NODE=$!
trap 'kill $NODE 2>/dev/null; wait $NODE 2>/dev/null; rm -rf "$TMP"' EXIT
i=0
while [ ! -s "$TMP/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -s "$TMP/port" ]; then
    echo "FAIL: kvpackd did not start"; cat "$TMP/kvpackd.log"; exit 1
fi
PORT=$(cat "$TMP/port")
PROMPT="Once upon a time, there was a little dog named Max. Max loved to run and play with his friends in the big green park near his house. One day"
rc=0
for codec in kivi oscar; do
    if ! "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" \
            --codec $codec --page-tokens 32 --steps 48 --node "127.0.0.1:$PORT" \
            --generate "$PROMPT" >"$TMP/out" 2>"$TMP/err"; then
        echo "FAIL: $codec round trip through the node"; cat "$TMP/out" "$TMP/err"; rc=1; continue
    fi
    cat "$TMP/out"
    grep -q "^identical: yes" "$TMP/out" || { echo "FAIL: $codec texts differ"; rc=1; }
    grep -q "fetched 5 pages + 5 tail pages" "$TMP/err" ||
        { echo "FAIL: $codec decode process did not fetch the session"; cat "$TMP/err"; rc=1; }
done
# an fp16 sink (first chunk unquantized, pages flagged KVP_PAGE_F_SINK) ahead of oscar chunks: the
# node takes the mixed session and the decode process rebuilds the same cache (3 chunks x 5 layers)
if ! "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" \
        --codec oscar@s1 --page-tokens 16 --steps 48 --node "127.0.0.1:$PORT" \
        --generate "$PROMPT" >"$TMP/out" 2>"$TMP/err"; then
    echo "FAIL: oscar@s1 round trip through the node"; cat "$TMP/out" "$TMP/err"; rc=1
else
    cat "$TMP/out"
    grep -q "^identical: yes" "$TMP/out" || { echo "FAIL: oscar@s1 texts differ"; rc=1; }
    grep -q "fetched 15 pages + 0 tail pages" "$TMP/err" ||
        { echo "FAIL: oscar@s1 decode process did not fetch the session"; cat "$TMP/err"; rc=1; }
fi
# regions a stored session cannot carry are refused up front
if "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" \
        --codec oscar@r16 --page-tokens 16 --node "127.0.0.1:$PORT" --generate "$PROMPT" \
        >/dev/null 2>"$TMP/err"; then
    echo "FAIL: --node accepted a residual window"; rc=1
fi
# a session that does not exist: the decode role fails cleanly
if "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" --codec kivi \
        --page-tokens 32 --node "127.0.0.1:$PORT" --decode-session nosuch --generate "$PROMPT" \
        >/dev/null 2>"$TMP/err"; then
    echo "FAIL: fetching a missing session succeeded"; rc=1
fi
exit $rc
