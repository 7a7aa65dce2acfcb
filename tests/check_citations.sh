#!/bin/sh
# The repository stands alone: its files cite its own docs and nothing else.
#  (a) No tracked file has a section sign or names a design note that is not in the
#      repository (the names are spelled in pieces below, so this file passes too).
#  (b) Every citation docs/<file>.md, "<heading>" (also without the comma, or with the path
#      in backticks) names a file that exists and one of its headings (#, ##, ... outside
#      fenced code), compared exactly, backticks ignored. More headings may follow, joined by
#      a comma, "and", "or" or "to", each optionally followed by a step or item number
#      (", step 4"). A path without a folder, <file>.md, "<heading>", means the file next to
#      the citing one or, where there is none, the top-level one (README.md, BENCHMARKS.md).
#      Citations may wrap across comment lines.
# Failures are printed as FILE:LINE: what. Needs only sh and awk; run from the repository root.
set -u
list=$(mktemp /tmp/check_citations.XXXXXX)
trap 'rm -f "$list"' EXIT
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files > "$list"
else  # an exported tree: every file outside out/
    find . -type f ! -path './.git/*' ! -path './out/*' | sed 's|^\./||' > "$list"
fi

LC_ALL=C awk -v list="$list" '
function binary(f) { return f ~ /\.(png|jpe?g|gif|pdf|ico|pyc|o|so|a|bin|gz|zip|safetensors)$/ }
function complain(f, n, msg) { printf "%s:%d: %s\n", f, n, msg; bad++ }
function dir_of(f) { return f ~ /\// ? substr(f, 1, match(f, /\/[^\/]*$/)) : "" }
function nobackticks(s) { gsub(/`/, "", s); return s }
# the headings of Markdown file f, once: heads[f, text] (text without backticks)
function load_headings(f,    line, fence, h) {
    if (f in loaded) return loaded[f]
    loaded[f] = 0
    while ((getline line < f) > 0) {
        loaded[f] = 1
        if (line ~ /^ ? ? ?(```|~~~)/) { fence = !fence; continue }
        if (fence || line !~ /^ ? ? ?#+[ \t]/) continue
        h = line
        sub(/^ ? ? ?#+[ \t]+/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h); sub(/[ \t]+$/, "", h)
        heads[f, nobackticks(h)] = 1
    }
    close(f)
    return loaded[f]
}
# the line of offset p in the paragraph that starts at line first and ends at line last
function line_at(p,    n) { n = first; while (n < last && start[n + 1] <= p) n++; return n }
function check_file(f,    line, n, text) {
    n = 0; text = ""; first = 1
    while ((getline line < f) > 0) {
        n++
        check_names(f, n, line)
        # a paragraph from its first line that names a .md file up to a blank line, joined
        # without the comment markers, so that a citation may wrap
        sub(/^[ \t]*(\/\/+|\/\*+|\*+|#+)?[ \t]*/, "", line)
        if (line == "") { last = n - 1; check_citations(f, text); text = ""; first = n + 1; continue }
        if (text == "" && !index(line, ".md")) { first = n + 1; continue }
        start[n] = length(text) + 1
        text = text line " "
    }
    close(f)
    last = n
    check_citations(f, text)
}
function check_names(f, n, line,    low, i) {
    if (index(line, sect)) complain(f, n, "section sign (cite a heading: docs/<file>.md, \"<heading>\")")
    low = tolower(line)
    for (i = 1; i <= nlow; i++) if (index(low, lowname[i])) complain(f, n, "names " lowname[i] " (not in the repository)")
    for (i = 1; i <= nexact; i++) if (index(line, exactname[i])) complain(f, n, "names " exactname[i] " (not in the repository)")
}
function check_citations(f, text,    rest, off, m, path, target, q, h) {
    rest = text; off = 0
    while (match(rest, /[A-Za-z0-9_.\/-]*[A-Za-z0-9_-]\.md`?,? +"[^"]*"/)) {
        m = substr(rest, RSTART, RLENGTH)
        q = RSTART + index(m, "\"") - 1          # the opening quote, in rest
        path = substr(m, 1, index(m, ".md") + 2)
        target = path ~ /\// ? path : dir_of(f) path
        sub(/^\.\//, "", target)
        if (path !~ /\// && !load_headings(target) && load_headings(path)) target = path  # a top-level file
        if (!load_headings(target)) {
            complain(f, line_at(off + RSTART), "cites " path ", which does not exist")
            rest = substr(rest, RSTART + RLENGTH); off += RSTART + RLENGTH - 1
            continue
        }
        # the first heading, then any chained after it
        rest = substr(rest, q); off += q - 1
        while (match(rest, /^"[^"]*"/)) {
            h = substr(rest, 2, RLENGTH - 2)
            cites++
            if (!((target, nobackticks(h)) in heads))
                complain(f, line_at(off + 1), "cites \"" h "\", which is not a heading of " target)
            rest = substr(rest, RLENGTH + 1); off += RLENGTH
            if (match(rest, /^, (steps?|items?) [0-9]+(-[0-9]+)?( and [0-9]+)?/)) {
                rest = substr(rest, RLENGTH + 1); off += RLENGTH
            }
            if (!match(rest, /^(,? (and|or|to) |, )"/)) break
            rest = substr(rest, RLENGTH); off += RLENGTH - 1
        }
    }
}
BEGIN {
    sect = "\302\247"
    nlow = split("shared/" "design kda" "-spec blocks" "-spec anchors" ".md", lowname, " ")
    nexact = split("ARCHITECTURE" ".md MACHINES" ".md", exactname, " ")
    bad = 0; files = 0; cites = 0
    while ((getline f < list) > 0) {
        if (binary(f)) continue
        files++
        check_file(f)
    }
    close(list)
    if (bad) { printf "check_citations: %d problem(s)\n", bad; exit 1 }
    printf "check_citations: ok (%d files, %d cited headings)\n", files, cites
}'
