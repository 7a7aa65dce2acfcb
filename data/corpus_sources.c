// The readers of `hybrid corpus`: SWORD modules, dictd databases, folders of text files,
// the Brown corpus. Each dies naming the file and the problem on anything unexpected.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/brown.h"
#include "data/corpus.h"
#include "data/json.h"
#include "data/inflate.h"
#include "base/util.h"

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *must_read(const char *path, size_t *len) {
    char *data = read_file(path, len);
    if (!data) die("corpus: %s: cannot read (%s)", path, strerror(errno));
    return data;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The names in a folder, sorted byte-wise, hidden ones left out; keep(name) filters.
static char **list_dir(const char *dir, int (*keep)(const char *), size_t *count) {
    DIR *d = opendir(dir);
    if (!d) die("corpus: %s: cannot read folder (%s)", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !keep(e->d_name)) continue;
        if (n == cap) names = xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof(char *));
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof(char *), cmp_names);
    *count = n;
    return names;
}

// ---- SWORD ----
// A compressed module holds, per testament (ot, nt), three files with a block-type letter
// X (b: book, c: chapter, v: verse blocks): X.zs, the blocks (offset, compressed size,
// size: 3 x uint32); X.zz, the zlib-compressed blocks; X.zv, one record per verse slot
// (block, offset in the block, size: uint32, uint32, then uint16 (zText, zCom) or uint32
// (zText4, zCom4)). A record of size 0 is an empty slot; records that repeat an earlier
// (block, offset) are linked verses (one comment for a range) and are read once.
static int sword_testament(const char *dir, const char *t, Buf *osis) {
    char name[16];
    char *zs = NULL, *zv = NULL, *zz = NULL;
    for (const char *x = "bcv"; *x; x++) {
        snprintf(name, sizeof name, "%s.%czs", t, *x);
        char *p = path_join(dir, name);
        int there = file_exists(p);
        if (there) {
            zs = p;
            snprintf(name, sizeof name, "%s.%czv", t, *x);
            zv = path_join(dir, name);
            snprintf(name, sizeof name, "%s.%czz", t, *x);
            zz = path_join(dir, name);
            break;
        }
        free(p);
    }
    if (!zs) return 0;
    size_t ns, nv, nz;
    unsigned char *bs = (unsigned char *)must_read(zs, &ns), *bv = (unsigned char *)must_read(zv, &nv),
                  *bz = (unsigned char *)must_read(zz, &nz);
    int found = ns > 0;
    if (ns % 12) die("corpus: %s: %zu bytes, not a whole number of 12-byte block records", zs, ns);
    size_t nblocks = ns / 12;
    Buf *blocks = xcalloc(nblocks ? nblocks : 1, sizeof(Buf));
    for (size_t b = 0; b < nblocks; b++) {
        uint32_t off = le32(bs + 12 * b), size = le32(bs + 12 * b + 4), usize = le32(bs + 12 * b + 8);
        if ((uint64_t)off + size > nz) die("corpus: %s: block %zu (offset %u, %u bytes) lies past the end of %s", zs, b, off, size, zz);
        const char *err = inflate_zlib(bz + off, size, &blocks[b]);
        if (err) die("corpus: %s: block %zu: %s", zz, b, err);
        if (blocks[b].len != usize)
            die("corpus: %s: block %zu holds %zu bytes, %s says %u", zz, b, blocks[b].len, zs, usize);
    }
    // the verse records: 10 or 12 bytes; the one size under which every record lies inside its block
    int rec = 0;
    for (int r = 10; r <= 12; r += 2) {
        if (nv % (size_t)r) continue;
        int ok = 1;
        for (size_t k = 0; k + (size_t)r <= nv && ok; k += (size_t)r) {
            uint32_t b = le32(bv + k), off = le32(bv + k + 4);
            uint32_t size = r == 10 ? (uint32_t)(bv[k + 8] | bv[k + 9] << 8) : le32(bv + k + 8);
            if (size && (b >= nblocks || (uint64_t)off + size > blocks[b].len)) ok = 0;
        }
        if (ok) {
            if (rec) die("corpus: %s: verse records read as 10 and as 12 bytes both fit: cannot tell the format", zv);
            rec = r;
        }
    }
    if (!rec && nv) die("corpus: %s: neither 10- nor 12-byte verse records fit the blocks of %s", zv, zs);
    CorpusSet seen = {0};
    for (size_t k = 0; rec && k + (size_t)rec <= nv; k += (size_t)rec) {
        uint32_t b = le32(bv + k), off = le32(bv + k + 4);
        uint32_t size = rec == 10 ? (uint32_t)(bv[k + 8] | bv[k + 9] << 8) : le32(bv + k + 8);
        if (!size || !corpus_set_add(&seen, (CorpusHash){b, off})) continue;
        buf_append(osis, blocks[b].data + off, size);
        buf_putc(osis, '\n');  // an entry's text ends where the next begins
    }
    for (size_t b = 0; b < nblocks; b++) buf_free(&blocks[b]);
    free(blocks), free(seen.keys);
    free(bs), free(bv), free(bz);
    free(zs), free(zv), free(zz);
    return found;
}

void corpus_read_sword(const char *dir, CorpusEmit emit, void *ctx) {
    Buf osis = {0};
    int found = sword_testament(dir, "ot", &osis);
    found += sword_testament(dir, "nt", &osis);
    if (!found) die("corpus: %s: no SWORD module here (expected ot.bzs/nt.bzs or the .czs/.vzs variants)", dir);
    corpus_osis_docs(osis.data, osis.len, emit, ctx);
    buf_free(&osis);
}

// ---- dictd ----
typedef struct {
    uint64_t off, len;
    size_t line;
    const char *word;
} DictEntry;

static int b64_value(char c) {
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(a, c) : NULL;
    return p ? (int)(p - a) : -1;
}

static int b64_number(const char *s, size_t n, uint64_t *v) {
    *v = 0;
    if (n == 0 || n > 10) return 0;
    for (size_t i = 0; i < n; i++) {
        int d = b64_value(s[i]);
        if (d < 0) return 0;
        *v = *v * 64 + (uint64_t)d;
    }
    return 1;
}

static int cmp_entries(const void *a, const void *b) {
    const DictEntry *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static int is_meta(const char *word) { return !strncmp(word, "00-", 3) || !strncmp(word, "00database", 10); }

// the first three ASCII letters or digits of a headword, lower case ("_" if none)
static void page_key(const char *word, char key[4]) {
    int k = 0;
    for (const char *p = word; *p && k < 3; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')) key[k++] = *p;
        else if (*p >= 'A' && *p <= 'Z') key[k++] = (char)(*p - 'A' + 'a');
    if (!k) key[k++] = '_';
    key[k] = 0;
}

void corpus_read_dictd(const char *base, CorpusEmit emit, void *ctx) {
    size_t blen = strlen(base) + 16;
    char *ipath = xmalloc(blen), *dpath = xmalloc(blen);
    snprintf(ipath, blen, "%s.index", base);
    size_t ilen, dlen;
    char *index = must_read(ipath, &ilen), *dict;
    snprintf(dpath, blen, "%s.dict", base);
    if (file_exists(dpath)) {
        dict = must_read(dpath, &dlen);
    } else {
        snprintf(dpath, blen, "%s.dict.dz", base);
        size_t zlen;
        char *z = must_read(dpath, &zlen);
        Buf out = {0};
        const char *err = inflate_gzip((const uint8_t *)z, zlen, &out);
        if (err) die("corpus: %s: %s", dpath, err);
        free(z);
        dict = out.data ? out.data : xstrdup("");
        dlen = out.len;
    }
    DictEntry *e = NULL;
    size_t n = 0, cap = 0, line = 0;
    CorpusSet meta = {0};
    for (char *p = index, *end = index + ilen; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        *nl = 0;
        line++;
        char *t1 = strchr(p, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        uint64_t off, len;
        if (*p) {
            if (!t2 || !b64_number(t1 + 1, (size_t)(t2 - t1 - 1), &off) || !b64_number(t2 + 1, strlen(t2 + 1), &len))
                die("corpus: %s:%zu: not a dictd index line (headword TAB offset TAB length, base64)", ipath, line);
            if (off + len > dlen)
                die("corpus: %s:%zu: the entry (offset %llu, %llu bytes) lies past the end of %s (%zu bytes)", ipath,
                    line, (unsigned long long)off, (unsigned long long)len, dpath, dlen);
            *t1 = 0;
            if (is_meta(p)) {
                corpus_set_add(&meta, (CorpusHash){off, 0});
            } else {
                if (n == cap) e = xrealloc(e, (cap = cap ? 2 * cap : 4096) * sizeof(DictEntry));
                e[n++] = (DictEntry){off, len, line, p};
            }
        }
        p = nl + 1;
    }
    qsort(e, n, sizeof(DictEntry), cmp_entries);
    Buf doc = {0};
    char key[4] = "", id[64], group[64];
    uint64_t last_off = UINT64_MAX;
    for (size_t k = 0; k < n; k++) {
        if (e[k].off == last_off) continue;  // more headwords for the same entry
        last_off = e[k].off;
        if (!corpus_set_add(&meta, (CorpusHash){e[k].off, 0})) continue;  // the database's own description (00-database-*)
        char kk[4];
        page_key(e[k].word, kk);
        if (strcmp(kk, key)) {
            if (doc.len) {
                snprintf(id, sizeof id, "%s", key);
                snprintf(group, sizeof group, "dict:%s", key);
                emit(ctx, id, group, doc.data, doc.len);
            }
            doc.len = 0;
            memcpy(key, kk, 4);
        }
        if (doc.len) buf_append(&doc, "\n\n", 2);
        corpus_dictd_entry(dict + e[k].off, (size_t)e[k].len, &doc);
    }
    if (doc.len) {
        snprintf(id, sizeof id, "%s", key);
        snprintf(group, sizeof group, "dict:%s", key);
        emit(ctx, id, group, doc.data, doc.len);
    }
    buf_free(&doc);
    free(e), free(meta.keys), free(index), free(dict), free(ipath), free(dpath);
}

// ---- folders of text, Brown ----
static int is_txt(const char *name) {
    size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".txt");
}

void corpus_read_text(const char *dir, CorpusEmit emit, void *ctx) {
    size_t n;
    char **names = list_dir(dir, is_txt, &n);
    if (!n) die("corpus: %s: no *.txt files", dir);
    for (size_t i = 0; i < n; i++) {
        char *p = path_join(dir, names[i]);
        size_t len;
        char *text = must_read(p, &len);
        names[i][strlen(names[i]) - 4] = 0;
        char group[256];
        snprintf(group, sizeof group, "text:%s", names[i]);
        emit(ctx, names[i], group, text, len);
        free(text), free(p), free(names[i]);
    }
    free(names);
}

void corpus_read_brown(const char *dir, CorpusEmit emit, void *ctx) {
    size_t n;
    char **names = list_dir(dir, brown_is_sample_name, &n);
    if (!n) die("corpus: %s: no Brown samples (files named like ca01)", dir);
    Buf text = {0};
    for (size_t i = 0; i < n; i++) {
        char *p = path_join(dir, names[i]);
        size_t len;
        char *tagged = must_read(p, &len);
        text.len = 0;
        brown_to_text(tagged, len, &text);
        char group[64];
        snprintf(group, sizeof group, "brown:%s", names[i]);
        emit(ctx, names[i], group, text.data ? text.data : "", text.len);
        free(tagged), free(p), free(names[i]);
    }
    buf_free(&text);
    free(names);
}

// ---- folders of JSON (the World Factbook) ----
#define JSON_MIN_TEXT 200  // shorter "text" strings are figures and labels, not prose

typedef struct {
    Buf *doc;
    Buf s;
    int depth;
} JsonWalk;

static const char *json_walk_value(const char **p, const char *end, JsonWalk *w);

static const char *json_walk_member(const char *key, size_t key_len, const char **p, const char *end, void *ctx) {
    JsonWalk *w = ctx;
    if (key_len == 4 && !memcmp(key, "text", 4) && *p < end && **p == '"') {
        w->s.len = 0;
        const char *err = json_string(p, end, &w->s);
        if (err) return err;
        if (w->s.len >= JSON_MIN_TEXT) {
            if (w->doc->len) buf_append(w->doc, "\n\n", 2);
            buf_append(w->doc, w->s.data, w->s.len);
        }
        return NULL;
    }
    return json_walk_value(p, end, w);
}

static const char *json_walk_value(const char **p, const char *end, JsonWalk *w) {
    json_skip_ws(p, end);
    if (*p >= end || (**p != '{' && **p != '[')) return json_skip_value(p, end);
    if (w->depth >= 512) return "nested more than 512 deep";
    w->depth++;
    const char *err = NULL;
    if (**p == '{') {
        err = json_object(p, end, json_walk_member, w);
    } else {
        (*p)++;
        json_skip_ws(p, end);
        if (*p < end && **p == ']') (*p)++;
        else
            for (;;) {
                if ((err = json_walk_value(p, end, w))) break;
                json_skip_ws(p, end);
                if (*p < end && **p == ',') { (*p)++; continue; }
                if (*p < end && **p == ']') { (*p)++; break; }
                err = "expected , or ] in an array";
                break;
            }
    }
    w->depth--;
    return err;
}

static int keep_all(const char *name) { (void)name; return 1; }

static void json_dir(const char *dir, const char *rel, CorpusEmit emit, void *ctx, size_t *nfiles) {
    size_t n;
    char **names = list_dir(dir, keep_all, &n);
    Buf doc = {0};
    JsonWalk w = {&doc, {0}, 0};
    for (size_t i = 0; i < n; i++) {
        char *p = path_join(dir, names[i]);
        char *r = *rel ? path_join(rel, names[i]) : xstrdup(names[i]);
        size_t len = strlen(names[i]);
        if (dir_exists(p)) {
            json_dir(p, r, emit, ctx, nfiles);
        } else if (len > 5 && !strcmp(names[i] + len - 5, ".json")) {
            size_t flen;
            char *text = must_read(p, &flen);
            const char *q = text, *err;
            doc.len = 0;
            if ((err = json_walk_value(&q, text + flen, &w)))
                die("corpus: %s: byte %zu: %s", p, (size_t)(q - text), err);
            json_skip_ws(&q, text + flen);
            if (q != text + flen) die("corpus: %s: byte %zu: text after the JSON value", p, (size_t)(q - text));
            r[strlen(r) - 5] = 0;
            char group[300];
            snprintf(group, sizeof group, "json:%s", r);
            emit(ctx, r, group, doc.data ? doc.data : "", doc.len);
            free(text);
            ++*nfiles;
        }
        free(p), free(r), free(names[i]);
    }
    buf_free(&doc), buf_free(&w.s);
    free(names);
}

void corpus_read_json(const char *dir, CorpusEmit emit, void *ctx) {
    size_t nfiles = 0;
    json_dir(dir, "", emit, ctx, &nfiles);
    if (!nfiles) die("corpus: %s: no *.json files", dir);
}
