#!/bin/sh
# Runs every C test binary given as arguments, then every tests/*.sh script (or the
# scripts listed in $RUN_SCRIPTS, when set: `make test-gpu` runs tests/gpu/check_hf.sh),
# one line each, and a summary line "N passed, N failed". Exits non-zero if anything failed.
passed=0
failed=0
failures=""
for t in "$@"; do
    name=$(basename "$t")
    start=$(date +%s)
    if "$t" > "$t.log" 2>&1; then
        passed=$((passed + 1)); status=ok
    else
        failed=$((failed + 1)); status=FAILED; failures="$failures $name"
    fi
    printf '%-32s %-6s %4ss  %s\n' "$name" "$status" $(( $(date +%s) - start )) "$(tail -n 1 "$t.log")"
    [ "$status" = ok ] || sed 's/^/    | /' "$t.log" | tail -n 40
done
for s in ${RUN_SCRIPTS-tests/*.sh}; do
    [ "$s" = tests/run_all.sh ] && continue
    [ -f "$s" ] || continue
    name=$(basename "$s")
    log="${BUILD:-out/build}/tests/$name.log"
    mkdir -p "$(dirname "$log")"
    start=$(date +%s)
    if sh "$s" > "$log" 2>&1; then
        passed=$((passed + 1)); status=ok
    else
        failed=$((failed + 1)); status=FAILED; failures="$failures $name"
    fi
    printf '%-32s %-6s %4ss  %s\n' "$name" "$status" $(( $(date +%s) - start )) "$(tail -n 1 "$log")"
    [ "$status" = ok ] || sed 's/^/    | /' "$log" | tail -n 40
done
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
