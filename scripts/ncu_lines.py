#!/usr/bin/env python3
"""Nsight Compute's warp-stall samples of one kernel, summed by source line.

ncu's own "--page source --print-source cuda" export came back empty on the device machine
(no metrics by CUDA line), and this machine has no cuobjdump / nvdisasm, so the mapping from
SASS addresses to source lines is read here from the line table (.debug_line) of a cubin that
nvcc builds with -lineinfo from the same sources and flags. Usage (docs/cuda.md, "Profiling by
source line"):

  # device machine, a -lineinfo build (CUDA_ARCH="-gencode arch=compute_90,code=sm_90 -lineinfo"):
  ncu --set full --import-source yes -k regex:dr_prep -c 1 -o R out/build/gpu/bench_delta_rule ...
  ncu -i R.ncu-rep --page source --csv --print-source sass > sass.csv
  # here, the same file with the same flags:
  nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -lineinfo -I. -DHAVE_CUDA -cubin \\
      -o prep.cubin kernels/delta_rule/chunk_prep_mma.cu
  scripts/ncu_lines.py sass.csv prep.cubin dr_prep_mma_kernel [--top 30] [--src kernels/delta_rule] [--own] [--around N]
      [--regions N] [--banks]

Prints the kernel's stall reasons, then the source lines with the most samples (share of all
samples, share of executed instructions, the three leading reasons, the hottest instructions).
The kernel is the first block of the CSV whose name contains the given text; its line table is
the cubin's sequence whose length equals the kernel's code size (an error if none or several
do: build the cubin from the same sources and flags, or pass --seq N). --own counts the
instructions of inlined headers outside --src (cuda_bf16.hpp's conversions, where a load's first
use waits) to the nearest earlier line under --src; --around N prints the N instructions before
each of the 10 hottest, to see which load a stall waits for; --regions N the kernel by address
windows (its stages, roughly); --banks the lines with the most bank-conflict wavefronts. Needs pyelftools
(Debian: python3-pyelftools); /usr/bin/python3 has it where the pyenv one does not.
"""
import argparse
import bisect
import collections
import csv
import os
import sys

csv.field_size_limit(1 << 30)


def line_sequences(cubin):
    """The cubin's line-table sequences: lists of (address, file, line), each from address 0."""
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError:
        sys.exit("ncu_lines: needs pyelftools (apt-get install python3-pyelftools; run with /usr/bin/python3)")
    elf = ELFFile(open(cubin, "rb"))
    sec = elf.get_section_by_name(".debug_line")
    if sec is None:
        sys.exit(f"ncu_lines: {cubin} has no .debug_line: build it with -lineinfo")
    dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
    seqs, off = [], 0
    while off < sec["sh_size"]:
        # .debug_line without .debug_info (a -lineinfo build): walk the programs one by one
        prog = dwarf._parse_line_program_at_offset(off, dwarf.structs)
        files = [e.name.decode() for e in prog["file_entry"]]
        cur = []
        for entry in prog.get_entries():
            st = entry.state
            if st is None:
                continue
            cur.append((st.address, files[st.file - 1] if 0 < st.file <= len(files) else "?", st.line))
            if st.end_sequence:
                seqs.append(cur)
                cur = []
        off = prog.program_end_offset
    return seqs


def kernel_block(path, name):
    """The first kernel block of an ncu source-page CSV whose name contains `name`."""
    block, hdr, rows = None, None, []
    for row in csv.reader(open(path)):
        if row and row[0] == "Kernel Name":
            if block is not None:
                break
            if name in row[1]:
                block = row[1]
            continue
        if block is None or not row:
            continue
        if row[0] == "Address":
            hdr = row
        elif row[0].startswith("0x"):
            rows.append(row)
    if block is None or hdr is None or not rows:
        sys.exit(f"ncu_lines: no kernel named like '{name}' with instructions in {path}")
    return block, hdr, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("cubin")
    ap.add_argument("kernel")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--seq", type=int, help="the line-table sequence to use (default: matched by size)")
    ap.add_argument("--src", default=".", help="folder to print the source lines from")
    ap.add_argument("--own", action="store_true",
                    help="count an instruction of a file not under --src (an inlined header: cuda_bf16.hpp's "
                         "conversions, mma.cuh's wrappers outside it) to the nearest earlier instruction's line "
                         "that is under --src: the caller that inlined it, in most code")
    ap.add_argument("--around", type=int, default=0, metavar="N",
                    help="after the table, the N instructions before each of the 10 hottest, with their lines")
    ap.add_argument("--regions", type=int, default=0, metavar="N",
                    help="after the table, the kernel in address order by windows of N instructions: each "
                         "window's share of the samples and of the executed instructions, and its four most "
                         "executed lines (a kernel's stages lie mostly in address order, where inlined "
                         "helpers scatter a line's count)")
    ap.add_argument("--banks", action="store_true",
                    help="after the table, the lines with the most excess shared-memory wavefronts (bank "
                         "conflicts: ncu's 'L1 Wavefronts Shared Excessive'), with their ideal count")
    a = ap.parse_args()

    name, hdr, rows = kernel_block(a.csv, a.kernel)
    base = int(rows[0][0], 16)
    size = int(rows[-1][0], 16) - base + 16
    seqs = line_sequences(a.cubin)
    if a.seq is not None:
        seq = seqs[a.seq]
    else:
        fits = [s for s in seqs if s[-1][0] == size]
        if len(fits) != 1:
            sys.exit(f"ncu_lines: {len(fits)} line-table sequences of {size} bytes (the kernel's code) in "
                     f"{a.cubin}: not built from the same sources and flags? (--seq N picks one; sizes: "
                     f"{[s[-1][0] for s in seqs]})")
        seq = fits[0]
    addrs = [x[0] for x in seq]

    samples = hdr.index("Warp Stall Sampling (All Samples)")
    executed = hdr.index("Instructions Executed")
    reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    val = lambda row, i: float(row[i] or 0)

    total_s = sum(val(r, samples) for r in rows)
    total_i = sum(val(r, executed) for r in rows) or 1.0
    by_reason = collections.Counter()
    per_line = collections.defaultdict(lambda: [0.0, 0.0, collections.Counter(), []])
    mine = {}  # file -> whether it is under --src

    def where(row):
        j = bisect.bisect_right(addrs, int(row[0], 16) - base) - 1
        return seq[j][1], seq[j][2]

    def own(f):
        if f not in mine:
            mine[f] = os.path.exists(os.path.join(a.src, f))
        return mine[f]

    lines, last = [], None
    for row in rows:  # address order
        f, line = where(row)
        if a.own and not own(f) and last is not None:
            f, line = last
        elif own(f):
            last = (f, line)
        lines.append((f, line))
    for row, key in zip(rows, lines):
        entry = per_line[key]
        s = val(row, samples)
        entry[0] += s
        entry[1] += val(row, executed)
        entry[3].append((s, row[1].strip()))
        for i in reasons:
            entry[2][hdr[i][6:]] += val(row, i)
            by_reason[hdr[i][6:]] += val(row, i)

    print(f"{name[:100]}\n{len(rows)} instructions, {total_s:.0f} warp samples, {total_i:.3g} instructions executed")
    rs = sum(by_reason.values()) or 1.0
    print("stall reasons: " + ", ".join(f"{k} {100 * v / rs:.1f}%" for k, v in by_reason.most_common(8)))
    sources = {}
    for (f, line), (s, ins, why, hot) in sorted(per_line.items(), key=lambda kv: -kv[1][0])[:a.top]:
        if f not in sources:
            p = os.path.join(a.src, f)
            sources[f] = open(p).read().split("\n") if os.path.exists(p) else None
        text = sources[f][line - 1].strip()[:80] if sources[f] and 0 < line <= len(sources[f]) else ""
        ws = sum(why.values()) or 1.0
        print(f"{100 * s / total_s:5.1f}% {100 * ins / total_i:5.1f}%i  {f}:{line}  {text}")
        print("        " + ", ".join(f"{k} {100 * v / ws:.0f}%" for k, v in why.most_common(3)) +
              "; " + " | ".join(t[:40] for _, t in sorted(hot, reverse=True)[:2]))
    if a.regions > 0:
        print(f"---- by address, windows of {a.regions} instructions: samples, executed, the most executed lines")
        for w in range(0, len(rows), a.regions):
            part = range(w, min(w + a.regions, len(rows)))
            s = sum(val(rows[i], samples) for i in part)
            ins = sum(val(rows[i], executed) for i in part)
            most = collections.Counter()
            for i in part:
                most[lines[i]] += val(rows[i], executed) + 1  # (+1: a window never run still names its lines)
            top = ", ".join(f"{os.path.basename(f)}:{line}" for (f, line), _ in most.most_common(4))
            print(f"{rows[w][0][-6:]:>6} {100 * s / total_s:5.1f}% {100 * ins / total_i:5.1f}%i  {top}")
    if a.banks:
        if "L1 Wavefronts Shared Excessive" not in hdr:
            sys.exit("ncu_lines: --banks: the CSV has no 'L1 Wavefronts Shared Excessive' column (ncu --set full)")
        ex, wf = hdr.index("L1 Wavefronts Shared Excessive"), hdr.index("L1 Wavefronts Shared")
        per = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        for row, key in zip(rows, lines):
            per[key][0] += val(row, ex)
            per[key][1] += val(row, wf)
            per[key][2] += val(row, samples)
        tx = sum(v[0] for v in per.values())
        tw = sum(v[1] for v in per.values()) or 1.0
        print(f"---- shared-memory wavefronts {tw:.3g}, excess {tx:.3g} ({100 * tx / tw:.1f}%): lines by excess")
        for (f, line), (x, w, s) in sorted(per.items(), key=lambda kv: -kv[1][0])[:10]:
            if x <= 0:
                break
            print(f"{100 * x / (tx or 1.0):5.1f}%  {os.path.basename(f)}:{line}  wavefronts {w:.3g} (ideal {w - x:.3g}), "
                  f"{100 * s / total_s:.1f}% of the samples")
    if a.around > 0:
        hottest = sorted(range(len(rows)), key=lambda i: -val(rows[i], samples))[:10]
        for i in sorted(hottest):
            print(f"---- {100 * val(rows[i], samples) / total_s:.2f}% at {rows[i][0]}")
            for k in range(max(0, i - a.around), i + 1):
                f, line = where(rows[k])
                print(f"{'>' if k == i else ' '} {rows[k][0][-6:]} {100 * val(rows[k], samples) / total_s:5.2f} "
                      f"{os.path.basename(f) + ':' + str(line):28s} {rows[k][1].strip()[:70]}")


if __name__ == "__main__":
    main()
