#!/bin/sh
# scripts/fla_peer.py's commit of an fla copy: a prepared copy (no .git of its own) sitting inside
# another repository must not report that repository's commit as fla's (it did: session 15's
# benchmark printed this repository's HEAD as "fla commit"); a checkout reports its own; COMMIT
# and FLA_COMMIT come first. Needs python3 and git.
set -u
tmp=$(mktemp -d /tmp/fla_peer.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v git > /dev/null && command -v python3 > /dev/null || { echo "skipped: fla_peer_commit needs git and python3"; exit 77; }
here=$(pwd)
commit() {  # FLA_DIR [FLA_COMMIT] -> the commit add_fla_to_path reports
    (cd "$tmp" && env -u FLA_PEER FLA_COMMIT="${2-}" FLA_DIR="$1" python3 -c "import sys; sys.path.insert(0, '$here/scripts')
import fla_peer; print(fla_peer.add_fla_to_path('t')[2])")
}
git init -q "$tmp/outer" && git -C "$tmp/outer" -c user.email=t@t -c user.name=t commit -q --allow-empty -m outer || fail "git init"
outer=$(git -C "$tmp/outer" rev-parse HEAD)
mkdir -p "$tmp/outer/out/peers/fla/flasrc/fla" "$tmp/outer/out/peers/fla/shim"
got=$(commit "$tmp/outer/out/peers/fla")
[ "$got" != "$outer" ] || fail "a prepared copy inside a repository reported that repository's commit $outer"
case "$got" in unknown*) ;; *) fail "a prepared copy without COMMIT: '$got', expected unknown (...)" ;; esac
echo "abc123" > "$tmp/outer/out/peers/fla/COMMIT"
[ "$(commit "$tmp/outer/out/peers/fla")" = abc123 ] || fail "the COMMIT file was not read"
got=$(commit "$tmp/outer/out/peers/fla" f00)
[ "$got" = f00 ] || fail "FLA_COMMIT did not come first: '$got'"
mkdir -p "$tmp/ck/fla" && git init -q "$tmp/ck" && git -C "$tmp/ck" -c user.email=t@t -c user.name=t commit -q --allow-empty -m fla || fail "git init (checkout)"
[ "$(commit "$tmp/ck")" = "$(git -C "$tmp/ck" rev-parse HEAD)" ] || fail "a checkout did not report its own HEAD"
echo "fla_peer_commit: ok"
