#!/usr/bin/env python3
"""Whether a kernel refactor changed the machine code: the kernels' .text sections of two sets of
cubins compared byte for byte.

  nvcc <the Makefile's NVCCFLAGS for sm_90> -cubin -o old.cubin kernels/x/a.cu      (before)
  nvcc ... -cubin -o new_a.cubin kernels/x/a.cu; nvcc ... -cubin -o new_b.cubin kernels/x/b.cu
  /usr/bin/python3 scripts/cubin_text_diff.py old.cubin -- new_a.cubin new_b.cubin

Each kernel (a `.text.<mangled name>` section) of the first set is looked up in the second by
name: `same` (identical bytes: the same instructions, so the same results on the GPU), `DIFF`, or
`missing`; a missing kernel whose bytes equal those of a kernel only in the second set is
`renamed` and counts as the same (a template parameter added: session 19's FULL instances keep
the old code under a longer name); kernels only in the second set are listed. Exit status 0
when every kernel is the same and none is missing. Moving a kernel to another file (session 13: the prep out of
chunk_fwd_mma.cu) keeps its bytes; a change of its code or of what it inlines does not. Needs
pyelftools (Debian: python3-pyelftools; /usr/bin/python3 has it where the pyenv one does not).
"""
import sys


def kernels(paths):
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError:
        sys.exit("cubin_text_diff: needs pyelftools (apt-get install python3-pyelftools; run with /usr/bin/python3)")
    out = {}
    for p in paths:
        for sec in ELFFile(open(p, "rb")).iter_sections():
            if sec.name.startswith(".text."):
                if sec.name in out:
                    sys.exit(f"cubin_text_diff: {sec.name} twice in one set ({p})")
                out[sec.name] = sec.data()
    return out


def main():
    args = sys.argv[1:]
    if "--" not in args or args.index("--") == 0 or args.index("--") == len(args) - 1:
        sys.exit("usage: cubin_text_diff.py OLD.cubin ... -- NEW.cubin ...")
    cut = args.index("--")
    old, new = kernels(args[:cut]), kernels(args[cut + 1:])
    bad = 0
    only_new = sorted(set(new) - set(old))
    for name in sorted(old):
        state, to = "missing" if name not in new else "same" if new[name] == old[name] else "DIFF", ""
        if state == "missing":
            twin = next((n for n in only_new if new[n] == old[name]), None)
            if twin:
                state, to = "renamed", f"  -> {twin[6:]}"
                only_new.remove(twin)
        bad += state not in ("same", "renamed")
        print(f"{state:7s} {len(old[name]):7d} bytes  {name[6:]}{to}")
    for name in only_new:
        print(f"new     {len(new[name]):7d} bytes  {name[6:]}")
    print(f"cubin_text_diff: {len(old) - bad} of {len(old)} kernels the same")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
