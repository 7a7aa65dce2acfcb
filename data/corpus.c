// `hybrid corpus`: reads the sources in the order given, normalises every document,
// drops repeated paragraphs and repeated documents (first occurrence wins), assigns each
// document to train or validation by a hash of its group, and writes one JSONL file whose
// order makes `hybrid prepare --val-docs N` put exactly the validation documents in val.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "base/util.h"

#define SPLIT_SEED 0x636f72707573ull  // "corpus": fixed, so the split never changes by itself
#define ORDER_SEED 0x6f72646572ull    // "order"
#define PARA_SEED 1
#define DOC_SEED 2
#define ID_SEED 3

static const char HELP[] =
    "usage: hybrid corpus [options] --out FILE.jsonl SOURCE...\n"
    "\n"
    "Builds a de-duplicated corpus with a validation split by document, as JSONL for\n"
    "`hybrid prepare` (scripts/setup_corpus.sh; data/README.md, \"The prose corpus\").\n"
    "SOURCE is KIND:NAME=PATH, read in the order given (NAME prefixes the document ids):\n"
    "  sword:NAME=DIR    a SWORD zText/zCom module folder (ot.bzs ... nt.bzz): one document\n"
    "                    per chapter; split group bible:<chapter>, shared by all Bibles and\n"
    "                    commentaries\n"
    "  dictd:NAME=BASE   a dictd database BASE.index + BASE.dict or BASE.dict.dz: runs of\n"
    "                    entries with the same first three letters are one document; split\n"
    "                    group dict:<letters>, shared by all dictionaries\n"
    "  text:NAME=DIR     every *.txt file in DIR is one document\n"
    "  brown:NAME=DIR    the Brown samples (ca01 .. cr09) in DIR, one document each\n"
    "  json:NAME=DIR     every *.json file under DIR is one document: its \"text\" strings of\n"
    "                    at least 200 bytes (the World Factbook's prose)\n"
    "\n"
    "Every document is normalised (data/corpus.h); a document that appeared before (same\n"
    "text up to ASCII case) is dropped, then a paragraph of at least --min-dedup bytes that\n"
    "appeared before, then a document left empty. A document is in validation iff a\n"
    "hash of its group falls below --val-frac, so a chapter's Bible texts and commentaries\n"
    "(or a dictionary page in every dictionary) are all train or all validation.\n"
    "  --out FILE        the JSONL output: {\"id\", \"split\", \"text\"} per line (required)\n"
    "  --val-frac F      validation share of the groups, 0 to 0.5 (default 0.02)\n"
    "  --min-dedup N     de-duplicate paragraphs of at least N bytes (default 64)\n"
    "  -h, --help        this help\n"
    "The output order is a hash of the ids, with validation documents where\n"
    "`hybrid prepare --val-docs V` takes them (V: the number of validation documents,\n"
    "printed at the end): hybrid prepare --format jsonl --val-docs V FILE.jsonl\n";

typedef struct {
    const char *kind, *name, *path;
    uint64_t docs_in, bytes_in, paras_dup, bytes_para_dup, docs_dup, docs_empty, docs, bytes, val_docs, val_bytes;
} Source;

typedef struct {
    char *id;
    char *text;
    size_t len;
    int val;
    CorpusHash order;
} CDoc;

typedef struct {
    Source *src;
    double val_frac;
    size_t min_dedup;
    CorpusSet paras, docs, ids;
    CDoc *out;
    size_t nout, cap;
    Buf norm, kept, lower;
} Corpus;

static CorpusHash hash_lower(Corpus *c, const char *s, size_t n, uint64_t seed) {
    c->lower.len = 0;
    buf_reserve(&c->lower, n);
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        c->lower.data[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
    }
    return corpus_hash(c->lower.data, n, seed);
}

static void take(void *ctx, const char *id, const char *group, const char *text, size_t len) {
    Corpus *c = ctx;
    Source *s = c->src;
    c->norm.len = 0;
    corpus_normalize(text, len, &c->norm);
    s->docs_in++;
    s->bytes_in += c->norm.len;
    // a document seen before goes whole; then its paragraphs seen before go
    if (!c->norm.len) {
        s->docs_empty++;
        return;
    }
    if (!corpus_set_add(&c->docs, hash_lower(c, c->norm.data, c->norm.len, DOC_SEED))) {
        s->docs_dup++;
        return;
    }
    c->kept.len = 0;
    for (size_t i = 0; i < c->norm.len;) {
        const char *p = c->norm.data + i;
        const char *brk = NULL;  // the next "\n\n" (the normal form has no longer runs)
        for (const char *q = p; (q = memchr(q, '\n', (size_t)(c->norm.data + c->norm.len - q))); q++)
            if (q + 1 < c->norm.data + c->norm.len && q[1] == '\n') {
                brk = q;
                break;
            }
        size_t n = brk ? (size_t)(brk - p) : c->norm.len - i;
        i += n + (brk ? 2 : 0);
        if (n >= c->min_dedup && !corpus_set_add(&c->paras, hash_lower(c, p, n, PARA_SEED))) {
            s->paras_dup++;
            s->bytes_para_dup += n;
            continue;
        }
        if (c->kept.len) buf_append(&c->kept, "\n\n", 2);
        buf_append(&c->kept, p, n);
    }
    if (!c->kept.len) {
        s->docs_empty++;
        return;
    }
    // the id: NAME:id, made unique with #2, #3, ... if a source repeats one
    size_t idlen = strlen(s->name) + strlen(id) + 24;
    char *full = xmalloc(idlen);
    snprintf(full, idlen, "%s:%s", s->name, id);
    for (int k = 2; !corpus_set_add(&c->ids, corpus_hash(full, strlen(full), ID_SEED)); k++)
        snprintf(full, idlen, "%s:%s#%d", s->name, id, k);
    CorpusHash g = corpus_hash(group, strlen(group), SPLIT_SEED);
    int val = (double)(g.hi >> 11) * 0x1.0p-53 < c->val_frac;
    if (c->nout == c->cap) c->out = xrealloc(c->out, (c->cap = c->cap ? 2 * c->cap : 4096) * sizeof(CDoc));
    CDoc *d = &c->out[c->nout++];
    d->id = full;
    d->text = xmalloc(c->kept.len);
    memcpy(d->text, c->kept.data, c->kept.len);
    d->len = c->kept.len;
    d->val = val;
    d->order = corpus_hash(full, strlen(full), ORDER_SEED);
    s->docs++;
    s->bytes += d->len;
    s->val_docs += (uint64_t)val;
    s->val_bytes += val ? d->len : 0;
}

static int cmp_order(const void *a, const void *b) {
    const CDoc *x = a, *y = b;
    if (x->order.hi != y->order.hi) return x->order.hi < y->order.hi ? -1 : 1;
    if (x->order.lo != y->order.lo) return x->order.lo < y->order.lo ? -1 : 1;
    return strcmp(x->id, y->id);
}

static void json_escaped(Buf *b, const char *s, size_t n) {
    buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') buf_putc(b, '\\'), buf_putc(b, (char)c);
        else if (c == '\n') buf_append(b, "\\n", 2);
        else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            buf_append(b, e, 6);
        } else buf_putc(b, (char)c);
    }
    buf_putc(b, '"');
}

static void write_doc(AtomicFile *f, Buf *line, const CDoc *d) {
    line->len = 0;
    buf_append(line, "{\"id\":", 6);
    json_escaped(line, d->id, strlen(d->id));
    const char *mid = d->val ? ",\"split\":\"val\",\"text\":" : ",\"split\":\"train\",\"text\":";
    buf_append(line, mid, strlen(mid));
    json_escaped(line, d->text, d->len);
    buf_append(line, "}\n", 2);
    atomic_write(f, line->data, line->len);
}

static void read_source(Corpus *c, Source *s) {
    c->src = s;
    if (!strcmp(s->kind, "sword")) corpus_read_sword(s->path, take, c);
    else if (!strcmp(s->kind, "dictd")) corpus_read_dictd(s->path, take, c);
    else if (!strcmp(s->kind, "text")) corpus_read_text(s->path, take, c);
    else if (!strcmp(s->kind, "brown")) corpus_read_brown(s->path, take, c);
    else corpus_read_json(s->path, take, c);
}

static double parse_double(const char *opt, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) die("corpus: %s needs a number from %g to %g, got \"%s\"", opt, lo, hi, v);
    return x;
}

int corpus_main(int argc, char **argv) {
    double start = now_seconds();
    Corpus c = {.val_frac = 0.02, .min_dedup = 64};
    const char *out_path = NULL;
    Source *src = xcalloc((size_t)argc, sizeof(Source));
    int nsrc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(HELP, stdout);
            free(src);
            return 0;
        }
        if (!strcmp(a, "--out") || !strcmp(a, "--val-frac") || !strcmp(a, "--min-dedup")) {
            if (i + 1 >= argc) die("corpus: %s needs a value (hybrid corpus --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--out")) out_path = v;
            else if (!strcmp(a, "--val-frac")) c.val_frac = parse_double(a, v, 0, 0.5);
            else c.min_dedup = (size_t)parse_double(a, v, 1, 1e9);
            continue;
        }
        if (a[0] == '-') die("corpus: unknown option %s (hybrid corpus --help)", a);
        const char *colon = strchr(a, ':'), *eq = colon ? strchr(colon, '=') : NULL;
        if (!colon || !eq || eq == colon + 1 || !eq[1])
            die("corpus: %s: a source is KIND:NAME=PATH (hybrid corpus --help)", a);
        char *kind = xstrdup(a);
        kind[colon - a] = 0;
        if (strcmp(kind, "sword") && strcmp(kind, "dictd") && strcmp(kind, "text") && strcmp(kind, "brown") &&
            strcmp(kind, "json"))
            die("corpus: %s: unknown kind \"%s\" (sword, dictd, text, brown or json)", a, kind);
        char *name = kind + (colon - a) + 1;
        name[eq - colon - 1] = 0;
        for (int k = 0; k < nsrc; k++)
            if (!strcmp(src[k].name, name)) die("corpus: two sources named \"%s\"", name);
        src[nsrc++] = (Source){.kind = kind, .name = name, .path = eq + 1};
    }
    if (!out_path) die("corpus: --out FILE is required (hybrid corpus --help)");
    if (!nsrc) die("corpus: no sources (hybrid corpus --help)");

    for (int k = 0; k < nsrc; k++) {
        read_source(&c, &src[k]);
        fprintf(stderr, "corpus: %-10s %8llu documents, %7.1f MB read (%.1f s)\n", src[k].name,
                (unsigned long long)src[k].docs_in, src[k].bytes_in / 1e6, now_seconds() - start);
    }
    if (!c.nout) die("corpus: the sources hold no text");

    // the order: by hash of the id; validation documents where prepare's rule puts them
    qsort(c.out, c.nout, sizeof(CDoc), cmp_order);
    size_t nval = 0;
    for (size_t i = 0; i < c.nout; i++) nval += (size_t)c.out[i].val;
    if (nval >= c.nout) die("corpus: every document landed in validation (lower --val-frac)");
    CDoc *train = xmalloc(c.nout * sizeof(CDoc)), *val = xmalloc((nval ? nval : 1) * sizeof(CDoc));
    size_t nt = 0, nv = 0;
    for (size_t i = 0; i < c.nout; i++) {
        if (c.out[i].val) val[nv++] = c.out[i];
        else train[nt++] = c.out[i];
    }
    AtomicFile f;
    atomic_open(&f, out_path);
    Buf line = {0};
    uint64_t D = c.nout, N = nval;
    for (uint64_t i = 0, ti = 0, vi = 0; i < D; i++) {
        int is_val = (i + 1) * N / D > i * N / D;  // data/prepare.c's is_val
        write_doc(&f, &line, is_val ? &val[vi++] : &train[ti++]);
    }
    atomic_commit(&f);

    printf("corpus: %-10s %9s %8s %8s %9s %10s %10s %8s %10s\n", "source", "documents", "dup-docs", "empty",
           "dup-paras", "bytes-in", "bytes-kept", "val-docs", "val-bytes");
    Source tot = {.name = "total"};
    for (int k = 0; k <= nsrc; k++) {
        Source *s = k < nsrc ? &src[k] : &tot;
        if (k < nsrc) {
            tot.docs += s->docs, tot.docs_dup += s->docs_dup, tot.docs_empty += s->docs_empty;
            tot.paras_dup += s->paras_dup, tot.bytes_in += s->bytes_in, tot.bytes += s->bytes;
            tot.val_docs += s->val_docs, tot.val_bytes += s->val_bytes;
        }
        printf("corpus: %-10s %9llu %8llu %8llu %9llu %10llu %10llu %8llu %10llu\n", s->name,
               (unsigned long long)s->docs, (unsigned long long)s->docs_dup, (unsigned long long)s->docs_empty,
               (unsigned long long)s->paras_dup, (unsigned long long)s->bytes_in, (unsigned long long)s->bytes,
               (unsigned long long)s->val_docs, (unsigned long long)s->val_bytes);
    }
    printf("corpus: wrote %s: %zu documents, %zu train, %zu validation (%.1f s)\n", out_path, c.nout, nt, nv,
           now_seconds() - start);
    printf("corpus: next: hybrid prepare --format jsonl --val-docs %zu %s\n", nv, out_path);

    for (size_t i = 0; i < c.nout; i++) free(c.out[i].id), free(c.out[i].text);
    free(c.out), free(train), free(val), free(line.data);
    free(c.paras.keys), free(c.docs.keys), free(c.ids.keys);
    buf_free(&c.norm), buf_free(&c.kept), buf_free(&c.lower);
    for (int k = 0; k < nsrc; k++) free((char *)src[k].kind);
    free(src);
    return 0;
}
