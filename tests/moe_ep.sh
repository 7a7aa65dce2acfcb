#!/bin/sh
# Expert parallelism over MPI (tests/test_moe_ep.c): the test binary under mpirun on 2
# ranks (ep 2) and 4 ranks (ep 2 x dp 2, ep 4). Without mpirun or in a build without MPI:
# "skipped: ..." and exit status 77 (run_all.sh counts it). BUILD: the build folder
# (run_all.sh sets it).
set -u
bin=${BUILD:-out/build}/tests/test_moe_ep
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
if ! command -v mpirun > /dev/null 2>&1; then
    echo "skipped: moe_ep's mpirun runs: no mpirun (Debian: openmpi-bin libopenmpi-dev)"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log=$(mktemp /tmp/hybrid_moe_ep.XXXXXX)
trap 'rm -f "$log"' EXIT
# alone (a world of one): the death tests and ep_size 1; it also says whether MPI is built in
"$bin" > "$log" 2>&1 || { cat "$log"; echo "FAIL: test_moe_ep alone"; exit 1; }
cat "$log"
if grep -q "built without MPI" "$log"; then
    echo "skipped: moe_ep's mpirun runs: this build has no MPI (Debian: libopenmpi-dev openmpi-bin)"
    exit 77
fi
for np in 2 4; do
    echo "== mpirun -np $np $bin"
    # ASan builds: Open MPI's own allocations at exit (in plugins it unloads, so no
    # suppression can name them) are not leak-checked; memory errors still are
    ASAN_OPTIONS=detect_leaks=0 HYBRID_DIST_TIMEOUT=60 timeout 120 mpirun --oversubscribe -np $np "$bin" > "$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -eq 0 ] || { echo "FAIL: test_moe_ep on $np ranks (exit status $rc)"; exit 1; }
    grep -q "^  $np ranks: worst" "$log" || { echo "FAIL: test_moe_ep on $np ranks did not run the EP checks"; exit 1; }
done
echo "moe_ep: ok (ep 2 on 2 ranks; ep 2 x dp 2 and ep 4 on 4 ranks)"
