#!/usr/bin/env python3
"""Holds kernel files whose two paths must give the same bits free of sums that ptxas may contract
two ways.

usage: check_contraction.py NVCC "NVCCFLAGS" FILE.cu...

nvcc writes `a * b + c * d` (and `- c * d`) as two mul.f32 and an add.f32 (sub.f32) without a
rounding mode, and ptxas, which contracts a product into the sum that uses it, may fuse either
product into an fma. Two kernels that write the same expression (a register kernel and the
general one, a fast path and the reference) can then round differently on the GPU, while the CPU
emulator (tests/cuda_emu/), which contracts nothing, gives them the same bits: the H200 found the
gated RMSNorm's two paths one bf16 apart this way (docs/delta-rule.md, "CUDA kernels",
its contraction item). A sum with one product (`s += a * b`) leaves ptxas one choice, and
explicit `__fmaf_rn` / `__fmul_rn` / `__fadd_rn` (PTX `.rn`) none.

Compiles each FILE to PTX with NVCC and NVCCFLAGS (the Makefile's, without -c / -MMD / -MP) and
fails, naming the kernel and the PTX lines, when an add.f32 or sub.f32 without a rounding mode
takes two operands that both come from mul.f32 without one (a neg.f32 of such a product counts as
one). A register is the value of its latest definition above the use, in PTX order.
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

ENTRY = re.compile(r'\.(?:visible\s+)?\.entry\s+(\S+?)\(')
INSTR = re.compile(r'^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9]*)((?:\.[a-z0-9]+)*)\s+(%f\d+)\s*,\s*(.*?);')
FREG = re.compile(r'%f\d+')


def product(op, mods):
    return op == 'mul' and '.f32' in mods and '.rn' not in mods and '.rz' not in mods and \
        '.rm' not in mods and '.rp' not in mods


def scan(ptx_path):
    """(kernel, mul line, mul line, sum line) for every ambiguous sum of the file's PTX"""
    found, kernel, defs = [], None, {}
    with open(ptx_path) as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                kernel, defs = m.group(1), {}
                continue
            m = INSTR.match(line)
            if not m or kernel is None:
                continue
            op, mods, dst, rest = m.groups()
            srcs = FREG.findall(rest)
            if op in ('add', 'sub') and '.f32' in mods and '.rn' not in mods and len(srcs) == 2:
                d = [defs.get(s) for s in srcs]
                if all(x is not None and x[0] == 'mul' for x in d):
                    found.append((kernel, d[0][1], d[1][1], line.strip()))
            if product(op, mods):
                defs[dst] = ('mul', line.strip())
            elif op == 'neg' and srcs and defs.get(srcs[0], ('', ''))[0] == 'mul':
                defs[dst] = defs[srcs[0]]
            else:
                defs[dst] = (op, line.strip())
    return found


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    nvcc, flags, files = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
    # one PTX: the first -gencode's virtual arch (nvcc -ptx -o takes one target)
    kept, arch, i = [], None, 0
    while i < len(flags):
        if flags[i] == '-gencode' and i + 1 < len(flags):
            m = re.search(r'arch=(compute_\d+a?)', flags[i + 1])
            arch = arch or (m.group(1) if m else None)
            i += 2
            continue
        if flags[i] not in ('-c', '-MMD', '-MP'):
            kept.append(flags[i])
        i += 1
    flags = kept + (['-arch=' + arch] if arch else [])
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        def compile_ptx(src):  # the files at once, one nvcc a core (the check's cost is these compiles)
            ptx = os.path.join(tmp, src.replace('/', '_') + '.ptx')
            return src, ptx, subprocess.run([nvcc] + flags + ['-ptx', '-o', ptx, src], capture_output=True, text=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            compiled = list(pool.map(compile_ptx, files))
        for src, ptx, r in compiled:
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                sys.exit('check_contraction: %s: nvcc -ptx failed' % src)
            found = scan(ptx)
            for kernel, m1, m2, s in found[:5]:
                print('check_contraction: %s: kernel %s: a sum of two contractible products:\n    %s\n    %s\n'
                      '    %s' % (src, kernel, m1, m2, s))
            if len(found) > 5:
                print('check_contraction: %s: %d more' % (src, len(found) - 5))
            bad += len(found)
    if bad:
        sys.exit('check_contraction: %d sums that ptxas may contract two ways, in files whose paths must '
                 'give the same bits: write them with __fmaf_rn (tests/check_contraction.py)' % bad)
    print('check_contraction: ok (%d files, no sum of two contractible products)' % len(files))


if __name__ == '__main__':
    main()
