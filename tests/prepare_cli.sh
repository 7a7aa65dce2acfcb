#!/bin/sh
# `hybrid prepare` through the CLI: --help, a small run, and an error exit.
# Run from the repository root after ./hybrid is built (HYBRID=path overrides).
set -u
hybrid=${HYBRID:-./hybrid}
tmp=$(mktemp -d /tmp/hybrid_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$hybrid" prepare --help > "$tmp/help" 2>&1 || fail "prepare --help exits with an error"
grep -q "usage: hybrid prepare" "$tmp/help" || fail "prepare --help does not print the usage"

mkdir -p "$tmp/in/sub"
printf 'Hello world' > "$tmp/in/a.txt"
printf 'Second document.\n' > "$tmp/in/sub/b.txt"
if ! "$hybrid" prepare --quiet --out "$tmp/out" --name t --val-docs 1 "$tmp/in" > "$tmp/log" 2>&1; then
    if grep -q "needs PCRE2" "$tmp/log"; then  # a build without PCRE2 (the GPU machine) must say so
        echo "skipped: prepare_cli's encoding run: this build has no PCRE2, only --help and the error message were tested (Debian: libpcre2-dev)"
        exit 77
    fi
    fail "prepare on two text files: $(cat "$tmp/log")"
fi
# header: magic 20240520, version 1, 3 tokens; then EOT 50256, Hello 15496, world 995
[ "$(od -An -tu4 -N12 "$tmp/out/t_train_000000.bin" | tr -s ' ')" = " 20240520 1 3" ] || fail "train shard header"
[ "$(od -An -tu2 -j1024 "$tmp/out/t_train_000000.bin" | tr -s ' ')" = " 50256 15496 995" ] || fail "train shard tokens"
[ -f "$tmp/out/t_val_000000.bin" ] || fail "no val shard"
# the scripts' reader and writer of the format (scripts/shard_io.py) agree with the C side: the
# shard prepare wrote reads back with its count, rewriting its tokens gives the same bytes, and
# a truncated shard, a wrong magic and an out-of-range token stop with the file named
shard_py() { /usr/bin/python3 -c "import sys; sys.path.insert(0, 'scripts'); from shard_io import *; $1" 2>&1; }
[ "$(shard_py "print(shard_tokens('$tmp/out/t_train_000000.bin'))")" = 3 ] || fail "shard_io: count of prepare's shard"
shard_py "write_shard('$tmp/py.bin', [50256, 15496, 995])" > /dev/null
cmp -s "$tmp/py.bin" "$tmp/out/t_train_000000.bin" || fail "shard_io: write_shard's bytes differ from prepare's"
head -c 1029 "$tmp/py.bin" > "$tmp/short.bin"
shard_py "shard_tokens('$tmp/short.bin')" | grep -q "short.bin: the header counts 3 tokens but the file has 1029 bytes" ||
    fail "shard_io: truncated shard: $(shard_py "shard_tokens('$tmp/short.bin')")"
{ printf 'XXXX'; tail -c +5 "$tmp/py.bin"; } > "$tmp/magic.bin"
shard_py "shard_tokens('$tmp/magic.bin')" | grep -q "magic.bin: not a token shard" || fail "shard_io: bad magic accepted"
shard_py "write_shard('$tmp/big.bin', [1, 65536])" | grep -q "big.bin: a token id outside 0..65535" ||
    fail "shard_io: a token id over 65535 accepted"
[ ! -e "$tmp/big.bin" ] && [ -z "$(ls "$tmp" | grep 'big.bin.tmp')" ] || fail "shard_io: a refused write left a file"
grep -q "^shard train 3 1030 [0-9a-f]\{8\} t_train_000000.bin$" "$tmp/out/t_manifest.txt" || fail "manifest: $(cat "$tmp/out/t_manifest.txt")"

# a prepare killed after its first shard leaves the earlier set; the next run cleans up and replaces it
cp "$tmp/out/t_train_000000.bin" "$tmp/old_train"
printf 'A third document.\n' > "$tmp/in/c.txt"
(HYBRID_KILL_AT=prepare-shard:1 exec "$hybrid" prepare --quiet --out "$tmp/out" --name t --val-docs 1 "$tmp/in") \
    > "$tmp/log" 2>&1 && fail "the kill hook did not kill prepare"
cmp -s "$tmp/old_train" "$tmp/out/t_train_000000.bin" || fail "a killed prepare changed the earlier shard"
[ -d "$tmp/out/.t.prepare-tmp" ] || fail "the killed run left no temporary folder (was it killed while writing?)"
"$hybrid" prepare --out "$tmp/out" --name t --val-docs 1 "$tmp/in" > "$tmp/log" 2>&1 || fail "prepare after a kill: $(cat "$tmp/log")"
grep -q "removed .*/.t.prepare-tmp, the unfinished output of an interrupted run" "$tmp/log" || fail "no note: $(cat "$tmp/log")"
[ -d "$tmp/out/.t.prepare-tmp" ] && fail "the leftover of the killed run is still there"
cmp -s "$tmp/old_train" "$tmp/out/t_train_000000.bin" && fail "the new run did not replace the earlier shard"

mkdir -p "$tmp/empty"
: > "$tmp/empty/nothing.txt"
if "$hybrid" prepare --quiet --out "$tmp/out" "$tmp/empty" > "$tmp/log" 2>&1; then fail "prepare on empty input succeeds"; fi
grep -q "no text" "$tmp/log" || fail "prepare on empty input: unclear error: $(cat "$tmp/log")"
echo "prepare_cli: ok"
