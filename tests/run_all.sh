#!/bin/sh
# Runs every C test binary given as arguments, then every tests/*.sh script (or the
# scripts listed in $RUN_SCRIPTS, when set: `make test-gpu` runs tests/gpu/check_hf.sh),
# one line each, and a summary line "N passed, N failed, N skipped".
# A test that could not run a part of itself here (a build without PCRE2 or MPI, no
# mpirun) prints a last line "skipped: WHAT (WHY)" and exits with status 77 (automake's
# convention; tests/testing.h TEST_MAIN_SKIP): it counts as skipped, not passed.
# Exits non-zero if anything failed, or with HYBRID_NO_SKIP=1 (.ci/run) if anything skipped.
#
# Tests run several at a time: HYBRID_TEST_JOBS of them, else make's -jN (MAKEFLAGS), else
# one per core (nproc). The lines come in the order above whatever the order of finishing,
# each with its test's own seconds (which include the time it shared the cores); a failed
# test's log follows its line. The tests named in RUN_ALONE (below) run one at a time with
# nothing beside them, before the others. Every test writes only its own files (its log,
# its own folder under out/test-tmp or a mktemp one), so running them side by side changes
# no result.
passed=0 failed=0 skipped=0
failures="" skips=""

# Run alone: the tests that start MPI jobs of up to 4 ranks (on a small machine those fill the
# cores by themselves; test_dist_cli also counts the seconds a job with a hung rank takes to end).
RUN_ALONE=${RUN_ALONE-"test_dist_cli moe_ep.sh moe_ep_cuda_emu.sh dp_cuda_emu.sh"}

jobs=${HYBRID_TEST_JOBS:-}
if [ -z "$jobs" ]; then
    for w in ${MAKEFLAGS:-}; do
        case $w in
            -j[0-9]*) jobs=${w#-j} ;;
            --jobs=[0-9]*) jobs=${w#--jobs=} ;;
        esac
    done
fi
[ -n "$jobs" ] || jobs=$(nproc 2>/dev/null || echo 1)
case $jobs in '' | *[!0-9]* | 0) jobs=1 ;; esac
# Side by side, the tests' OpenMP threads outnumber the cores, and an idle thread that spins
# (libgomp's default) holds a core that the thread it waits for needs: test_decode took 82 s of
# CPU instead of 3 beside one other program. Waiting threads sleep instead (the results do not
# depend on it).
[ "$jobs" -eq 1 ] || export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

state=$(mktemp -d "${TMPDIR:-/tmp}/hybrid_run_all.XXXXXX") || exit 1
trap 'rm -rf "$state"' EXIT
trap 'exit 130' INT TERM
default_signals=
! env --default-signal=INT,QUIT true 2> /dev/null || default_signals="env --default-signal=INT,QUIT"

# the tests, numbered 1..n: $state/<i>.test holds the name, the log and the command
n=0
add_test() {  # NAME LOG COMMAND...
    n=$((n + 1))
    printf '%s\n' "$@" > "$state/$n.test"
    case " $RUN_ALONE " in *" $1 "*) : > "$state/$n.alone" ;; esac
}
for t in "$@"; do
    add_test "$(basename "$t")" "$t.log" "$t"
done
for s in ${RUN_SCRIPTS-tests/*.sh}; do
    [ "$s" = tests/run_all.sh ] && continue
    [ -f "$s" ] || continue
    log="${BUILD:-out/build}/tests/$(basename "$s").log"
    mkdir -p "$(dirname "$log")"
    add_test "$(basename "$s")" "$log" sh "$s"
done

# Runs test I; writes "STATUS SECONDS" to $state/<I>.done when it ends. (The tests get the
# default handling of SIGINT and SIGQUIT back: sh starts a background job with them ignored.)
run_test() {
    id=$1
    [ -e "$state/$id.test" ] || return 0  # (interrupted: $state is gone)
    {
        read -r name
        read -r log
        set --
        while read -r word; do set -- "$@" "$word"; done
    } < "$state/$id.test"
    start=$(date +%s)
    $default_signals "$@" > "$log" 2>&1
    rc=$?
    { echo "$rc $(($(date +%s) - start))" > "$state/$id.tmp" && mv "$state/$id.tmp" "$state/$id.done"; } 2> /dev/null
}

# Takes the next unclaimed test (mkdir is atomic: one taker each) until none is left.
worker() {
    i=1
    while [ "$i" -le "$n" ]; do
        if [ ! -e "$state/$i.alone" ] && mkdir "$state/$i.claim" 2> /dev/null; then run_test "$i"; fi
        i=$((i + 1))
    done
}

(
    i=1
    while [ "$i" -le "$n" ]; do
        [ ! -e "$state/$i.alone" ] || run_test "$i"
        i=$((i + 1))
    done
    k=0
    while [ "$k" -lt "$jobs" ]; do
        worker &
        k=$((k + 1))
    done
    wait
) < /dev/null &
runner=$!

# the lines, in order, each once its test has ended
i=1
while [ "$i" -le "$n" ]; do
    while [ ! -e "$state/$i.done" ] && kill -0 "$runner" 2> /dev/null; do sleep 1; done
    { read -r name; read -r log; } < "$state/$i.test"
    if [ -e "$state/$i.done" ]; then read -r rc secs < "$state/$i.done"
    else rc=-1 secs=0; echo "(the runner ended before this test did)" >> "$log"; fi
    case $rc in
        0) passed=$((passed + 1)) status=ok ;;
        77) skipped=$((skipped + 1)) status=SKIPPED skips="$skips $name" ;;
        *) failed=$((failed + 1)) status=FAILED failures="$failures $name" ;;
    esac
    printf '%-32s %-7s %4ss  %s\n' "$name" "$status" "$secs" "$(tail -n 1 "$log")"
    [ "$status" != FAILED ] || sed 's/^/    | /' "$log" | tail -n 40
    i=$((i + 1))
done
wait "$runner"

[ -z "$failures" ] || echo "failed:$failures"
[ -z "$skips" ] || echo "skipped:$skips (each says what it could not test and which package it needs)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || exit 1
if [ "$skipped" -gt 0 ] && [ "${HYBRID_NO_SKIP:-0}" = 1 ]; then
    echo "HYBRID_NO_SKIP=1: a skipped test counts as a failure"
    exit 1
fi
exit 0
