# Sourced by scripts/kernel_ab.sh and scripts/kernel_variants.sh: the tree's versions of the
# kernel files a comparison swaps, saved at the start and put back when the script ends (a trap
# on EXIT: also after a failed build or an interrupt; not after kill -9, when they stay in the
# folder it names).
# kernel_files_save TOOL FILE...: copies the files into a new temporary folder, $KF_SAVE
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
