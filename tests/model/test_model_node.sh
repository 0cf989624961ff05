#!/bin/sh
# test_model_node.sh - `kvpack model --node` end to end: start a real kvpackd on loopback, prefill
# stories260K in one kvpack process, streaming its pages to the node as they seal (kvp_put_stream:
# several pushes for the 3-chunk oscar@s1 case), decode in a second process that
# fetches them, and require the fetched decode to equal the in-process one (for two codecs, and
# for oscar behind an fp16 sink chunk); each round trip deletes its session from the node unless
# --keep-session, which names the session and leaves it there to decode again. Another model under
# the same file name (one weight bit apart) does not get that session (its namespace is the
# file's CRC32C too: it used to decode the first model's KV as its own).
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
# every round trip above deleted its session afterwards (they used to stay on the node: 3 sessions)
"$BIN/kvpack" stat --node "127.0.0.1:$PORT" >"$TMP/stat" 2>&1
grep -Eq "^sessions +0 " "$TMP/stat" ||
    { echo "FAIL: sessions left on the node after the round trips"; cat "$TMP/stat"; rc=1; }
# --keep-session leaves it, names it, and it decodes again
if ! "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" --codec oscar \
        --page-tokens 32 --steps 8 --node "127.0.0.1:$PORT" --keep-session --generate "$PROMPT" \
        >"$TMP/out" 2>"$TMP/err"; then
    echo "FAIL: --keep-session round trip"; cat "$TMP/out" "$TMP/err"; rc=1
fi
SID=$(sed -n 's/^session \(model-[0-9-]*\) kept on the node$/\1/p' "$TMP/out")
"$BIN/kvpack" stat --node "127.0.0.1:$PORT" >"$TMP/stat" 2>&1
if [ -z "$SID" ] || ! grep -Eq "^sessions +1 " "$TMP/stat"; then
    echo "FAIL: --keep-session did not keep and name its session"; cat "$TMP/out" "$TMP/stat"; rc=1
elif ! "$BIN/kvpack" model --model "$R/stories260K.bin" --tokenizer "$R/tok512.bin" --codec oscar \
        --page-tokens 32 --steps 8 --node "127.0.0.1:$PORT" --decode-session "$SID" \
        --generate "$PROMPT" >"$TMP/out2" 2>"$TMP/err"; then
    echo "FAIL: the kept session $SID does not decode"; cat "$TMP/err"; rc=1
else
    printf '[oscar via node 127.0.0.1:%s] %s%s\n' "$PORT" "$PROMPT" "$(cat "$TMP/out2")" \
        >"$TMP/want"
    head -c "$(wc -c <"$TMP/want")" "$TMP/out" | cmp -s - "$TMP/want" ||
        { echo "FAIL: the kept session decodes to another text"; cat "$TMP/out" "$TMP/out2"; rc=1; }
fi
# two models named m.bin, one bit apart in their last weight: B does not get A's session
mkdir "$TMP/a" "$TMP/b"
cp "$R/stories260K.bin" "$TMP/a/m.bin"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-4] ^= 1; open(sys.argv[2], "wb").write(b)' \
    "$TMP/a/m.bin" "$TMP/b/m.bin"
if ! "$BIN/kvpack" model --model "$TMP/a/m.bin" --tokenizer "$R/tok512.bin" --codec kivi \
        --page-tokens 32 --steps 4 --node "127.0.0.1:$PORT" --keep-session --generate "$PROMPT" \
        >"$TMP/out" 2>"$TMP/err"; then
    echo "FAIL: model A --keep-session"; cat "$TMP/out" "$TMP/err"; rc=1
fi
SID=$(sed -n 's/^session \(model-[0-9-]*\) kept on the node$/\1/p' "$TMP/out")
if [ -z "$SID" ]; then
    echo "FAIL: model A kept no session"; rc=1
elif "$BIN/kvpack" model --model "$TMP/b/m.bin" --tokenizer "$R/tok512.bin" --codec kivi \
        --page-tokens 32 --steps 4 --node "127.0.0.1:$PORT" --decode-session "$SID" \
        --generate "$PROMPT" >"$TMP/out2" 2>"$TMP/err"; then
    echo "FAIL: model B decoded model A's session $SID as its own"; cat "$TMP/out2"; rc=1
elif ! "$BIN/kvpack" model --model "$TMP/a/m.bin" --tokenizer "$R/tok512.bin" --codec kivi \
        --page-tokens 32 --steps 4 --node "127.0.0.1:$PORT" --decode-session "$SID" \
        --generate "$PROMPT" >"$TMP/out2" 2>"$TMP/err"; then
    echo "FAIL: model A does not decode its own session $SID"; cat "$TMP/err"; rc=1
fi
exit $rc
