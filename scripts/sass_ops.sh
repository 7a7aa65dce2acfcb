#!/bin/bash
# The SASS of a kernel file on this machine (no GPU, no cuobjdump in CUDA 13's install here):
# compiles a .cu for sm_90 as the Makefile does, disassembles it with the cuobjdump of Debian's
# nvidia-cuda-toolkit 11.8 (non-free; fetched once into out/tools/, never committed), and prints
# each kernel's registers, spills and instruction count with its most frequent opcodes. Static
# counts, not executed ones (a loop's body counts once), but what a change to a hot loop does to
# it shows: session 18 found a branch around every guarded exponential this way (chunk.cuh,
# dr_exp_note).
#   scripts/sass_ops.sh kernels/delta_rule/chunk_prep_mma.cu [COMMIT]   (COMMIT: that version's kernels/)
#   SASS_KEEP=DIR keeps the .sass listing there (grep it for a kernel's hot loop)
# cuobjdump 11.8 does not know CUDA 13's cubin header (ELF ABI 8, the arch in e_flags bits 8-15):
# the copy it reads has the older header (ABI 7, e_flags 0x5a055a: sm_90); the code is the same
# sm_90 SASS, and an instruction 11.8 does not know prints as an empty line.
set -eu
src=${1:?usage: scripts/sass_ops.sh FILE.cu [COMMIT]}
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/out/tools
cuobjdump=$tools/nvidia-cuda-toolkit/usr/bin/cuobjdump
if [ ! -x "$cuobjdump" ]; then
    mkdir -p "$tools/apt/lists/partial" "$tools/apt/cache/archives/partial"
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$tools/apt/nonfree.sources"
    A="-o Dir::Etc::sourcelist=$tools/apt/nonfree.sources -o Dir::Etc::sourceparts=/dev/null -o Dir::State::Lists=$tools/apt/lists -o Dir::Cache=$tools/apt/cache"
    apt-get $A update > /dev/null
    (cd "$tools" && apt-get $A download nvidia-cuda-toolkit > /dev/null 2>&1) || { echo "sass_ops: apt-get download nvidia-cuda-toolkit failed"; exit 1; }
    dpkg -x "$tools"/nvidia-cuda-toolkit_*.deb "$tools/nvidia-cuda-toolkit"
    rm -f "$tools"/nvidia-cuda-toolkit_*.deb
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
inc="-I$root"
if [ -n "${2:-}" ]; then
    (cd "$root" && git archive "$2" kernels model) | tar x -C "$tmp"
    inc="-I$tmp -I$root"; src=$tmp/$src
fi
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 $inc -DHAVE_CUDA -DHAVE_NCCL -DHAVE_CUDNN --resource-usage \
    -cubin -o "$tmp/k.cubin" "$src" 2> "$tmp/res" || { cat "$tmp/res"; exit 1; }
python3 - "$tmp/k.cubin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[7], b[8] = 0x33, 7
struct.pack_into('<I', b, 48, 0x5a055a)
open(sys.argv[1], 'wb').write(b)
PY
"$cuobjdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
[ -n "${SASS_KEEP:-}" ] && mkdir -p "$SASS_KEEP" && cp "$tmp/k.sass" "$SASS_KEEP/$(basename "$src" .cu).sass"
python3 - "$tmp/k.sass" "$tmp/res" <<'PY'
import collections, re, sys
res, name = {}, None
for line in open(sys.argv[2]):
    m = re.search(r"Function properties for (\S+)", line)
    if m: name = m.group(1)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and name: res.setdefault(name, {})['spill'] = f"spill {m.group(1)}/{m.group(2)} B"
    m = re.search(r"Function (\S+)\s*:.*Used (\d+) registers", line) or re.search(r"Used (\d+) registers", line)
    if m and name and 'regs' not in res.get(name, {}): res.setdefault(name, {})['regs'] = f"{m.groups()[-1]} registers"
for part in open(sys.argv[1]).read().split('Function : ')[1:]:
    fn = part.split('\n', 1)[0].strip()
    ops = collections.Counter()
    for m in re.finditer(r'/\*[0-9a-f]{4,}\*/\s+(.*?);', part):
        ins = re.sub(r'^@!?U?P[0-9T]+\s+', '', m.group(1).strip())
        ops[ins.split()[0].split('.')[0]] += 1
    r = res.get(fn, {})
    print(f"{fn}\n  {sum(ops.values())} instructions, {r.get('regs', '?')}, {r.get('spill', '?')}")
    print('  ' + ' '.join(f'{k}:{v}' for k, v in ops.most_common(16)))
PY
