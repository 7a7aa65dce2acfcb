# Sourced by the tests that train through ./hybrid on the emulated CUDA backend under mpirun
# (tests/moe_ep_cuda_emu.sh, tests/dp_cuda_emu.sh; `name` set first): checks that ./hybrid, the
# emulated plugin (out/build/emu/libhybrid_cuda_emu.so; docs/cuda.md, "The CPU emulator") and
# mpirun are there ("skipped: ..." and 77 without the last two), exports what the runs need,
# makes $tmp (removed at exit) with a token shard of 20,000 random ids below 1000 in
# $tmp/data, and defines fail().
hybrid=${HYBRID:-./hybrid}
plugin=${BUILD:-out/build}/emu/libhybrid_cuda_emu.so
[ -x "$hybrid" ] || { echo "FAIL: $hybrid is not built"; exit 1; }
[ -f "$plugin" ] || { echo "skipped: $name: no $plugin (make $plugin; not in SANITIZE builds)"; exit 77; }
command -v mpirun > /dev/null 2>&1 || { echo "skipped: $name: no mpirun (Debian: openmpi-bin libopenmpi-dev)"; exit 77; }
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 HYBRID_CUDA_PLUGIN="$plugin"
tmp=$(mktemp -d "/tmp/hybrid_$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tmp/data"
/usr/bin/python3 - "$tmp/data/t_train_000000.bin" <<'PY' || fail "could not write the token shard"
import random, sys
sys.path.insert(0, "scripts")
from shard_io import write_shard
r = random.Random(3)
write_shard(sys.argv[1], [r.randrange(1000) for _ in range(20000)])
PY
