#!/bin/sh
# fla's Triton cache across device calls (BENCHMARKS.md, "H200: chunkwise KDA and GDN against
# fla"). On a fresh device machine fla's Triton kernels compile and autotune for minutes (~440 s
# of a call for chunk_kda's three benchmark shapes); a cache made in one call and carried into the
# next skips that. A call brings back at most 8 files of 16 MiB, and the KDA cache is ~31 MiB
# compressed, so it travels in parts:
#   pack CACHE_DIR OUT_DIR     (on the device, at the end of a call: CACHE_DIR is the run's
#                               TRITON_CACHE_DIR; writes OUT_DIR/triton_cache.tgz.00, .01, ..)
#   pack-tuned CACHE_DIR OUT_DIR
#                              (the autotuner's choices alone, its *.autotune.json files in their
#                               folders: OUT_DIR/triton_tuned.tgz, ~100 KiB. A call carries the
#                               working tree, fla and the cache within 64 MiB together, which the
#                               whole cache of the KDA and hybrid shapes, ~68 MiB compressed, can
#                               never meet; with the choices cached Triton benchmarks nothing and
#                               compiles only each kernel's chosen configuration)
#   unpack PARTS_DIR CACHE_DIR (on the device, before fla runs: the parts brought back, or a
#                               triton_tuned.tgz, copied here into an ignored folder that the call
#                               carries, e.g. out/devrun/triton/; CACHE_DIR then serves as
#                               TRITON_CACHE_DIR)
# Set TRITON_CACHE_AUTOTUNING=1 for both runs, so that the autotuner's choices are cached and read
# (else each process benchmarks every configuration again, compiled or not).
set -eu
usage() {
    echo "usage: scripts/triton_cache.sh pack CACHE_DIR OUT_DIR | pack-tuned CACHE_DIR OUT_DIR | unpack PARTS_DIR CACHE_DIR" >&2
    exit 2
}
[ $# -eq 3 ] || usage
case "$1" in
pack)
    [ -d "$2" ] || { echo "triton_cache: no cache folder $2" >&2; exit 1; }
    mkdir -p "$3"
    tar czf - -C "$2" . | split -b 15M -d - "$3/triton_cache.tgz."
    ls -l "$3"/triton_cache.tgz.* ;;
pack-tuned)
    [ -d "$2" ] || { echo "triton_cache: no cache folder $2" >&2; exit 1; }
    n=$(cd "$2" && find . -name '*.autotune.json' | wc -l)
    [ "$n" -gt 0 ] || { echo "triton_cache: no *.autotune.json in $2 (was TRITON_CACHE_AUTOTUNING=1 set?)" >&2; exit 1; }
    mkdir -p "$3"
    (cd "$2" && find . -name '*.autotune.json' | LC_ALL=C sort | tar czf - -T -) > "$3/triton_tuned.tgz"
    echo "triton_cache: $n autotune choices in $3/triton_tuned.tgz ($(wc -c < "$3/triton_tuned.tgz") bytes)" ;;
unpack)
    set -- "$2" "$3"
    if ls "$1"/triton_cache.tgz.* > /dev/null 2>&1; then
        mkdir -p "$2"
        cat "$1"/triton_cache.tgz.* | tar xzf - -C "$2"
    elif [ -f "$1/triton_tuned.tgz" ]; then
        mkdir -p "$2"
        tar xzf "$1/triton_tuned.tgz" -C "$2"
    else
        echo "triton_cache: no triton_cache.tgz.NN parts and no triton_tuned.tgz in $1" >&2; exit 1
    fi
    echo "triton_cache: $(find "$2" -type f | wc -l) files in $2" ;;
*) usage ;;
esac
