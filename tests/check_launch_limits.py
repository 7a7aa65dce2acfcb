#!/usr/bin/env python3
"""Holds every kernel launch of the emulated tests against what the GPU build gave that kernel.

usage: check_launch_limits.py LAUNCH_LOG CU_BUILD_DIR

The CPU emulator (tests/cuda_emu/) runs a block of any size with any registers: it cannot know
that the H200 refuses a launch whose block needs more registers than an SM has (65,536) or more
shared memory than a block may hold (227 KiB). Such a launch fails only on the device (session 8:
the MoE plan's scan kernel at 64 experts, a 1024-thread block at too many registers a thread).
This check closes that gap before a device call:

- LAUNCH_LOG: the lines the emulated tests append at exit (HYBRID_EMU_LAUNCH_LOG, cuda_emu.cpp):
  executable, kernel address in it, the largest block (threads) and the largest dynamic shared
  memory of that kernel's launches. addr2line names each kernel (demangled, with its source file).
- CU_BUILD_DIR: the GPU build's objects, each with a .res file of ptxas's resource usage
  (`nvcc --resource-usage`, the Makefile's rule): per kernel (mangled), registers a thread and
  static shared memory. c++filt demangles them; the two demangled signatures are the same text
  (the emulator builds the same sources with the same types).

A block of n threads takes ceil(n / 32) warps; a warp's registers are allocated in units of 256,
so it needs ceil(32 r / 256) * 256 for r registers a thread (the CUDA occupancy calculator's
rule for sm_90). The launch fails when the warps' registers exceed 65,536, or static plus dynamic
shared memory exceeds 232,448 bytes. Every kernel from kernels/ or dist/ that the emulated tests
launch must be found in the GPU build (a kernel of the emulator alone, e.g. its own tests', is
not); a kernel the GPU build has and the tests never launch is counted, not an error.
"""
import glob
import os
import re
import subprocess
import sys

REGS_PER_SM = 65536
REG_UNIT = 256           # a warp's registers are allocated in units of 256
MAX_SMEM = 232448        # an sm_90 block's shared memory (227 KiB), static + dynamic
MAX_REGS = 255


def die(msg):
    print(f"check_launch_limits: {msg}", file=sys.stderr)
    sys.exit(1)


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def ptxas_usage(cu_dir):
    """demangled kernel -> (registers, static smem bytes, object) from every .res under cu_dir"""
    mangled = {}
    res_files = glob.glob(os.path.join(cu_dir, "**", "*.o.res"), recursive=True)
    objects = glob.glob(os.path.join(cu_dir, "**", "*.o"), recursive=True)
    stale = [o for o in objects if not os.path.exists(o + ".res")]
    if stale or not res_files:
        die(f"{len(stale) or 'no'} CUDA object(s) under {cu_dir} without ptxas's resource usage (.o.res), e.g. "
            f"{(stale or [cu_dir])[0]}: built by an older rule; delete them (`rm -r {cu_dir}`) and build again")
    entry = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)' for 'sm_\d+a?'")
    used = re.compile(r"^ptxas info\s*: Used (\d+) registers(.*)$")
    smem = re.compile(r"(\d+) bytes smem")
    for path in res_files:
        current = None
        with open(path, errors="replace") as f:
            for line in f:
                m = entry.match(line)
                if m:
                    current = m.group(1)
                    continue
                m = used.match(line)
                if m and current:
                    s = smem.search(m.group(2))
                    mangled[current] = (int(m.group(1)), int(s.group(1)) if s else 0, path[:-4])
                    current = None
    names = list(mangled)
    return {d: mangled[n] for n, d in zip(names, demangle(names))}


ADDRESS = re.compile(r"0x[0-9a-f]+$")  # addr2line -a's line before each address's chain


def launches(log):
    """(demangled kernel, source file) -> (max threads, max dynamic smem)"""
    if not os.path.exists(log):
        die(f"{log}: no launch log (the emulated tests write it with HYBRID_EMU_LAUNCH_LOG set)")
    by_exe = {}
    with open(log) as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                die(f"{log}:{n}: not 'executable, address, threads, smem': {line.strip()!r}")
            exe, addr, threads, dsmem = parts
            by_exe.setdefault(exe, []).append((addr, int(threads), int(dsmem)))
    if not by_exe:
        die(f"{log}: empty (no emulated test launched a kernel?)")
    found = {}
    for exe, rows in by_exe.items():
        # -i: a kernel's first instruction may belong to a function inlined into it (position-
        # independent objects, which the emulator's plugin needs, start the GLU kernels with
        # glu_rows); -a starts each address's chain with the address, whose last (function,
        # location) pair is the kernel itself
        out = subprocess.run(["addr2line", "-a", "-i", "-C", "-f", "-e", exe] + [a for a, _, _ in rows],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        chains = []
        for line in out:
            if ADDRESS.match(line):
                chains.append([])
            elif chains:
                chains[-1].append(line)
        if len(chains) != len(rows) or any(not c or len(c) % 2 for c in chains):
            die(f"addr2line on {exe}: {len(chains)} address chains for {len(rows)} addresses")
        for i, (_, threads, dsmem) in enumerate(rows):
            key = (chains[i][-2], chains[i][-1].split(":")[0])
            t, s = found.get(key, (0, 0))
            found[key] = (max(t, threads), max(s, dsmem))
    return found


def block_registers(regs, threads):
    warps = (threads + 31) // 32
    per_warp = (regs * 32 + REG_UNIT - 1) // REG_UNIT * REG_UNIT
    return warps * per_warp


def main():
    if len(sys.argv) != 3:
        die("usage: check_launch_limits.py LAUNCH_LOG CU_BUILD_DIR")
    usage = ptxas_usage(sys.argv[2])
    seen = launches(sys.argv[1])
    errors, checked, launched = [], 0, set()
    for (kernel, src), (threads, dsmem) in sorted(seen.items()):
        if not re.search(r"/(kernels|dist)/", src):
            continue  # the emulator's own kernels (tests/cuda_emu), not in the GPU build
        if kernel not in usage:
            errors.append(f"{kernel} ({src}): launched by the emulated tests, but not in the GPU build's ptxas "
                          f"output (a kernel the GPU build does not compile, or a name this check cannot match)")
            continue
        regs, ssmem, obj = usage[kernel]
        launched.add(kernel)
        checked += 1
        need = block_registers(regs, threads)
        if regs > MAX_REGS or need > REGS_PER_SM:
            errors.append(f"{kernel} ({src}): a block of {threads} threads at {regs} registers a thread needs "
                          f"{need} registers, an SM has {REGS_PER_SM}: the GPU refuses this launch "
                          f"(cap the registers with __launch_bounds__({threads}) or use fewer threads)")
        if ssmem + dsmem > MAX_SMEM:
            errors.append(f"{kernel} ({src}): {ssmem} bytes of static and {dsmem} of dynamic shared memory, "
                          f"a block has at most {MAX_SMEM}")
    for e in errors:
        print(f"check_launch_limits: {e}", file=sys.stderr)
    never = len(set(usage) - launched)
    print(f"check_launch_limits: {checked} kernels launched by the emulated tests fit the H200's registers and "
          f"shared memory{'' if not errors else ' except the above'}; {never} of the GPU build's {len(usage)} "
          f"kernels are not launched by them")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
