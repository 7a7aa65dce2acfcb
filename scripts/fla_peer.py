"""fla (flash-linear-attention) on sys.path for the scripts that measure or check against it
(bench_fla_kda.py, bench_fla_hybrid.py, check_fla_kda.py). fla is never part of this
repository: the device machine gets a prepared copy (flasrc/ = fla's tree, shim/ = a flash_attn
stand-in over torch SDPA, an optional COMMIT file) carried as an ignored folder, or any fla
checkout (a folder with fla/)."""
import os
import subprocess
import sys


def git_commit_of(folder):
    """The commit of the git checkout whose top level is folder, else "". A prepared copy has no
    .git of its own, and `git -C` would climb to an enclosing repository (this one, when the copy
    sits under out/) and report that repository's commit as fla's."""
    try:
        r = subprocess.run(["git", "-C", folder, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                           text=True, timeout=10)
    except Exception:
        return ""
    out = r.stdout.split()
    return out[1] if r.returncode == 0 and len(out) == 2 and os.path.realpath(out[0]) == os.path.realpath(folder) else ""


def add_fla_to_path(prog, root=None):
    """Puts fla (and the shim, when there is one) first on sys.path. root: the folder, else
    $FLA_PEER or $FLA_DIR. Returns (root, src, commit); exits naming prog on a bad folder."""
    root = root or os.environ.get("FLA_PEER") or os.environ.get("FLA_DIR")
    if not root:
        sys.exit(f"{prog}: set FLA_PEER (or FLA_DIR) to a prepared fla copy (flasrc/, shim/) or an fla checkout")
    if os.path.isdir(os.path.join(root, "flasrc")):
        src = os.path.join(root, "flasrc")
    elif os.path.isdir(os.path.join(root, "fla")):
        src = root
    else:
        sys.exit(f"{prog}: {root} has neither flasrc/ (a prepared copy) nor fla/ (a checkout)")
    if os.path.isdir(os.path.join(root, "shim")):  # flash_attn stand-in: fla's attention layers import it
        sys.path.insert(0, os.path.join(root, "shim"))
    sys.path.insert(0, src)
    commit = os.environ.get("FLA_COMMIT", "")
    if not commit and os.path.isfile(os.path.join(root, "COMMIT")):
        commit = open(os.path.join(root, "COMMIT")).read().strip()
    if not commit:
        commit = git_commit_of(src)
    return root, src, commit or "unknown (no COMMIT file, no FLA_COMMIT, no git)"
