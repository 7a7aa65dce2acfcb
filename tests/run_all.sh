#!/bin/sh
# Runs every C test binary given as arguments, then every tests/*.sh script (or the
# scripts listed in $RUN_SCRIPTS, when set: `make test-gpu` runs tests/gpu/check_hf.sh),
# one line each, and a summary line "N passed, N failed, N skipped".
# A test that could not run a part of itself here (a build without PCRE2 or MPI, no
# mpirun) prints a last line "skipped: WHAT (WHY)" and exits with status 77 (automake's
# convention; tests/testing.h TEST_MAIN_SKIP): it counts as skipped, not passed.
# Exits non-zero if anything failed, or with HYBRID_NO_SKIP=1 (.ci/run) if anything skipped.
passed=0 failed=0 skipped=0
failures="" skips=""

run_one() {  # NAME LOG COMMAND...
    name=$1 log=$2
    shift 2
    start=$(date +%s)
    "$@" > "$log" 2>&1
    case $? in
        0) passed=$((passed + 1)) status=ok ;;
        77) skipped=$((skipped + 1)) status=SKIPPED skips="$skips $name" ;;
        *) failed=$((failed + 1)) status=FAILED failures="$failures $name" ;;
    esac
    printf '%-32s %-7s %4ss  %s\n' "$name" "$status" $(($(date +%s) - start)) "$(tail -n 1 "$log")"
    [ "$status" != FAILED ] || sed 's/^/    | /' "$log" | tail -n 40
}

for t in "$@"; do
    run_one "$(basename "$t")" "$t.log" "$t"
done
for s in ${RUN_SCRIPTS-tests/*.sh}; do
    [ "$s" = tests/run_all.sh ] && continue
    [ -f "$s" ] || continue
    log="${BUILD:-out/build}/tests/$(basename "$s").log"
    mkdir -p "$(dirname "$log")"
    run_one "$(basename "$s")" "$log" sh "$s"
done
[ -z "$failures" ] || echo "failed:$failures"
[ -z "$skips" ] || echo "skipped:$skips (each says what it could not test and which package it needs)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || exit 1
if [ "$skipped" -gt 0 ] && [ "${HYBRID_NO_SKIP:-0}" = 1 ]; then
    echo "HYBRID_NO_SKIP=1: a skipped test counts as a failure"
    exit 1
fi
exit 0
