# Sourced by scripts/kernel_ab.sh and scripts/kernel_variants.sh, what both comparisons of kernel
# versions do the same way on the device machine (docs/cuda.md, "Measuring a kernel change
# against main").
#
# kernel_files_save TOOL FILE...: the tree's versions of the kernel files a comparison swaps,
# copied into a new temporary folder ($KF_SAVE) and put back when the script ends (a trap on
# EXIT: also after a failed build or an interrupt; not after kill -9, when they stay in the
# folder it names).
kernel_files_save() {
    kf_tool=$1
    shift
    KF_FILES="$*"
    KF_SAVE=$(mktemp -d)
    for f in $KF_FILES; do cp "$f" "$KF_SAVE/"; done
    echo "$kf_tool: the tree's $KF_FILES saved in $KF_SAVE"
    trap kernel_files_restore EXIT
}
kernel_files_restore() { for f in $KF_FILES; do cp "$KF_SAVE/$(basename "$f")" "$f"; done; }

# kernel_data: the Brown shards carried in out/devrun/data/ (`make data` here) where the
# fingerprint configs read them
kernel_data() { mkdir -p out/data && cp out/devrun/data/* out/data/ 2>/dev/null; }

# kernel_fingerprints FILE: the GPU loss fingerprints (scripts/loss_fingerprint.sh: the first 20
# losses and the weight / optimizer hashes) of kda-tiny and kl-xs-3-1 with the ./hybrid built
# now, in both arithmetics of the delta rule (HYBRID_DR_BF16=1, one MMA a product, the default
# since session 27, and =0, the split products: set explicitly, so that a build from before that
# default compares too), appended to FILE; two builds meant to give the same bits give equal files
kernel_fingerprints() {
    for a in 1 0; do
        echo "HYBRID_DR_BF16=$a" >> "$1"
        for c in kda-tiny kl-xs-3-1; do
            HYBRID_DR_BF16=$a sh scripts/loss_fingerprint.sh --device cuda "configs/$c.conf" >> "$1" 2>&1
        done
    done
}

# kernel_fp_verdict NEW OLD: FINGERPRINTS EQUAL, FINGERPRINTS DIFFER (with the first lines of the
# diff) or FINGERPRINTS FAILED when a fingerprint run of either failed (two failed runs would
# otherwise compare equal)
kernel_fp_verdict() {
    if grep -q "failed" "$1" "$2" 2>/dev/null || [ ! -s "$1" ] || [ ! -s "$2" ]; then
        echo "FINGERPRINTS FAILED: a run did not finish ($1, $2)"
    elif cmp -s "$1" "$2"; then
        echo "FINGERPRINTS EQUAL"
    else
        echo "FINGERPRINTS DIFFER"
        diff "$2" "$1" | head -20
    fi
}
