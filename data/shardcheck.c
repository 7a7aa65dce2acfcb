#include "shardcheck.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/manifest.h"
#include "data/shard.h"
#include "data/shardset.h"
#include "base/util.h"

// <pattern's folder>/<what>: glob() expands a pattern in the folder part too
static char *beside(const char *pattern, const char *what) {
    const char *slash = strrchr(pattern, '/');
    int dir = slash ? (int)(slash - pattern) : 1;
    size_t n = (size_t)dir + strlen(what) + 2;
    char *s = xmalloc(n);
    snprintf(s, n, "%.*s/%s", dir, slash ? pattern : ".", what);
    return s;
}

// ".<name>.<suffix>" -> name (a new string)
static char *name_of(const char *path, const char *suffix) {
    const char *base = strrchr(path, '/') + 1;
    char *name = xstrdup(base + 1);
    name[strlen(name) - strlen(suffix)] = 0;
    return name;
}

// Finishes committed publishes in the pattern's folder; notes unfinished prepares.
static void settle_folder(const char *pattern, int notes) {
    static const char *kinds[2] = {".prepare-publish", ".prepare-tmp"};
    for (int k = 0; k < 2; k++) {
        char *pat = beside(pattern, k == 0 ? ".*.prepare-publish" : ".*.prepare-tmp");
        glob_t g;
        if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) {
                char *dir = xstrdup(g.gl_pathv[i]), *name = name_of(dir, kinds[k]);
                *strrchr(dir, '/') = 0;
                if (k == 0 && shardset_finish_publish(dir, name) && notes)
                    fprintf(stderr, "data: note: finished publishing the shard set %s/%s of an interrupted prepare\n",
                            dir, name);
                if (k == 1 && notes)
                    fprintf(stderr, "data: note: %s is the unfinished output of %s prepare; ignored\n", g.gl_pathv[i],
                            shardset_tmp_in_use(g.gl_pathv[i]) ? "a running" : "an interrupted");
                free(dir), free(name);
            }
        }
        globfree(&g);
        free(pat);
    }
}

typedef struct {
    char *path;      // <dir>/<name>_manifest.txt
    int present;
    Manifest m;
    int splits_seen; // bit 0: train, bit 1: val, bit 2: another split
} Loaded;

static Loaded *load(Loaded **all, int *n, const char *dir, const char *name) {
    char *path = manifest_path(dir, name);
    for (int i = 0; i < *n; i++)
        if (!strcmp((*all)[i].path, path)) {
            free(path);
            return &(*all)[i];
        }
    *all = xrealloc(*all, sizeof(Loaded) * (size_t)(*n + 1));
    Loaded *l = &(*all)[(*n)++];
    memset(l, 0, sizeof *l);
    l->path = path;
    l->present = manifest_read(&l->m, path);
    return l;
}

static void check_shard(const char *path, const ManifestEntry *e, const char *manifest, int vocab_size, size_t *ntok) {
    struct stat st;
    if (e && stat(path, &st) == 0 && (uint64_t)st.st_size != e->bytes)
        die("%s: %lld bytes, but %s says %llu (truncated, or replaced since prepare wrote it)", path,
            (long long)st.st_size, manifest, (unsigned long long)e->bytes);
    ShardScan s;
    shard_scan(path, vocab_size, &s);
    if (e && s.crc != e->crc)
        die("%s: checksum mismatch: CRC-32 %08x, but %s says %08x (the file was modified, or comes from another "
            "prepare run)", path, s.crc, manifest, e->crc);
    if (s.bad_index >= 0)
        die("%s: token id %u at token %lld (byte offset %lld) is >= vocab_size %d", path, s.bad_id,
            (long long)s.bad_index, (long long)(SHARD_HEADER_BYTES + 2 * s.bad_index), vocab_size);
    *ntok = s.tokens;
}

// Every shard of a split that the pattern touched must have been matched.
static void check_complete(const Loaded *l, const char *pattern) {
    for (int i = 0; i < l->m.n; i++) {
        const ManifestEntry *e = &l->m.e[i];
        int bit = !strcmp(e->split, "train") ? 1 : !strcmp(e->split, "val") ? 2 : 4;
        if (e->seen || !(l->splits_seen & bit)) continue;
        char *dir = xstrdup(l->path);
        *strrchr(dir, '/') = 0;
        size_t n = strlen(dir) + strlen(e->file) + 2;
        char *path = xmalloc(n);
        snprintf(path, n, "%s/%s", dir, e->file);
        if (file_exists(path))
            die("%s: listed in %s but not matched by %s: give a pattern that takes the whole %s split", path, l->path,
                pattern, e->split);
        die("%s: missing, but %s lists it (a partial set of %s shards)", path, l->path, e->split);
    }
}

void shards_open(ShardList *s, const char *pattern, int vocab_size, int notes) {
    memset(s, 0, sizeof *s);
    if (!pattern || !*pattern) die("data: no shard pattern given");
    settle_folder(pattern, notes);
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0))
        die("%s: no shard files match this pattern (run `make data`, or `hybrid prepare`)", pattern);
    if (rc != 0) die("%s: cannot expand the shard pattern", pattern);
    s->n = (int)g.gl_pathc;
    s->paths = xcalloc((size_t)s->n, sizeof(char *));
    s->ntok = xcalloc((size_t)s->n, sizeof(size_t));
    ManifestEntry **entry = xcalloc((size_t)s->n, sizeof(ManifestEntry *));
    Loaded *all = NULL;
    int nloaded = 0, unchecked = 0;
    int *owner = xcalloc((size_t)s->n, sizeof(int));
    for (int i = 0; i < s->n; i++) {  // match every path with its manifest's entry
        const char *path = s->paths[i] = xstrdup(g.gl_pathv[i]);
        char *dir, *name, *split;
        owner[i] = -1;
        if (!shard_name_parse(path, &dir, &name, &split)) {
            unchecked++;
            continue;
        }
        Loaded *l = load(&all, &nloaded, dir, name);
        owner[i] = (int)(l - all);
        if (!l->present) {
            unchecked++;
        } else {
            const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
            entry[i] = manifest_find(&l->m, base);
            if (!entry[i] || strcmp(entry[i]->split, split))
                die("%s: not listed in %s: a shard of another prepare run, or a stray file (move it away, or run "
                    "prepare again)", path, l->path);
            entry[i]->seen = 1;
            l->splits_seen |= !strcmp(split, "train") ? 1 : !strcmp(split, "val") ? 2 : 4;
        }
        free(dir), free(name), free(split);
    }
    globfree(&g);
    for (int k = 0; k < nloaded; k++)
        if (all[k].present) check_complete(&all[k], pattern);
    for (int i = 0; i < s->n; i++)
        check_shard(s->paths[i], entry[i], owner[i] >= 0 ? all[owner[i]].path : NULL, vocab_size, &s->ntok[i]);
    if (unchecked && notes)
        fprintf(stderr, "data: note: %s: %d of %d shard%s without a manifest (llm.c's format, or an older `hybrid "
                "prepare`): header, size and token ids are checked, not whether the set is complete and unchanged\n",
                pattern, unchecked, s->n, s->n == 1 ? "" : "s");
    for (int k = 0; k < nloaded; k++) {
        free(all[k].path);
        if (all[k].present) manifest_free(&all[k].m);
    }
    free(all), free(entry), free(owner);
}

void shards_free(ShardList *s) {
    for (int i = 0; i < s->n; i++) free(s->paths[i]);
    free(s->paths), free(s->ntok);
    memset(s, 0, sizeof *s);
}
