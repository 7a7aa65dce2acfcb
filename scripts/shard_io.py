"""The token shard format for the scripts, in one place (the C side is data/shard.h; the
format: docs/background.md, "llm.c token shards"): a header of 256 little-endian int32 (magic
20240520, version 1, the token count, the rest 0), then the tokens as little-endian uint16.
Standard library only (array), so the CPU tests can use it without numpy."""
import array
import os
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


def _little(a):
    if sys.byteorder != "little":
        a.byteswap()
    return a


def write_shard(path, tokens):
    """Writes tokens (ints in [0, 65535]) as a shard at path, atomically: a temporary name in
    the same folder, then a rename, so a stopped writer leaves no half shard under the name."""
    t = array.array("H")
    try:
        t.extend(tokens)
    except OverflowError:
        sys.exit(f"{path}: a token id outside 0..65535 (a shard holds uint16 tokens)")
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, len(t)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            _little(header).tofile(f)
            _little(t).tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        sys.exit(f"{path}: could not write the shard ({e.strerror})")


def shard_tokens(path):
    """The token count of the shard at path, after checking magic, version and the file's
    size; stops naming the file and the problem otherwise."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        sys.exit(f"{path}: {len(raw)} bytes, shorter than a shard's {HEADER_BYTES}-byte header")
    header = _little(array.array("i", raw[:12]))
    if header[0] != MAGIC or header[1] != VERSION:
        sys.exit(f"{path}: not a token shard (magic {header[0]}, version {header[1]}; "
                 f"want {MAGIC}, {VERSION})")
    count, size = header[2], os.path.getsize(path)
    if count < 0 or size != HEADER_BYTES + 2 * count:
        sys.exit(f"{path}: the header counts {count} tokens but the file has {size} bytes "
                 f"(want {HEADER_BYTES + 2 * max(count, 0)})")
    return count
