#!/bin/sh
# scripts/triton_cache.sh: a cache folder packed into parts of at most 15 MiB (a device call
# brings back files of up to 16 MiB) and unpacked again gives the same files, nested folders
# and an empty file included; pack-tuned keeps the *.autotune.json files alone, in their folders,
# and unpack restores them from it; a cache without them, a missing parts folder and a bad verb
# are refused.
set -u
t=$(mktemp -d /tmp/triton_cache.XXXXXX)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/c/ab/cd" "$t/c/ef"
head -c 33000000 /dev/urandom > "$t/c/ab/cd/kernel.cubin"  # incompressible: three parts
echo '{"key": 1}' > "$t/c/ef/__grp__k.json"
: > "$t/c/ef/empty"
sh scripts/triton_cache.sh pack "$t/c" "$t/parts" > /dev/null || { echo "check_triton_cache: pack failed"; exit 1; }
n=$(ls "$t/parts" | wc -l)
big=$(find "$t/parts" -type f -size +15360k | wc -l)
if [ "$n" -ne 3 ] || [ "$big" -ne 0 ]; then echo "check_triton_cache: FAILED: $n parts, $big over 15 MiB"; exit 1; fi
sh scripts/triton_cache.sh unpack "$t/parts" "$t/u" > /dev/null || { echo "check_triton_cache: unpack failed"; exit 1; }
if ! diff -r "$t/c" "$t/u" > /dev/null; then echo "check_triton_cache: FAILED: the unpacked cache differs"; exit 1; fi
if sh scripts/triton_cache.sh unpack "$t/none" "$t/v" 2> /dev/null; then echo "check_triton_cache: FAILED: unpacked from no parts"; exit 1; fi
if sh scripts/triton_cache.sh copy "$t/c" "$t/w" 2> /dev/null; then echo "check_triton_cache: FAILED: a bad verb ran"; exit 1; fi
# the autotuner's choices alone
echo '{"configs_timings": [["BLOCK: 64", [1.0]]]}' > "$t/c/ab/k1.autotune.json"
echo '{"configs_timings": [["BLOCK: 32", [2.0]]]}' > "$t/c/ef/k2.autotune.json"
sh scripts/triton_cache.sh pack-tuned "$t/c" "$t/tuned" > /dev/null || { echo "check_triton_cache: pack-tuned failed"; exit 1; }
sh scripts/triton_cache.sh unpack "$t/tuned" "$t/x" > /dev/null || { echo "check_triton_cache: unpack (tuned) failed"; exit 1; }
got=$(cd "$t/x" && find . -type f | LC_ALL=C sort | tr '\n' ' ')
if [ "$got" != "./ab/k1.autotune.json ./ef/k2.autotune.json " ]; then
    echo "check_triton_cache: FAILED: pack-tuned brought back: $got"; exit 1
fi
for f in ab/k1.autotune.json ef/k2.autotune.json; do
    cmp -s "$t/c/$f" "$t/x/$f" || { echo "check_triton_cache: FAILED: $f differs after pack-tuned"; exit 1; }
done
mkdir -p "$t/bare/ab" && echo x > "$t/bare/ab/kernel.cubin"
if sh scripts/triton_cache.sh pack-tuned "$t/bare" "$t/y" 2> /dev/null; then
    echo "check_triton_cache: FAILED: pack-tuned of a cache without autotune choices"; exit 1
fi
echo "check_triton_cache: ok (3 parts of at most 15 MiB, the same files back; the autotune choices alone)"
