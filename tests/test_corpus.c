// `hybrid corpus` and its parts on small fixtures (tests/fixtures/corpus/, and SWORD modules
// written here): DEFLATE decoding, the normal form, dictd and OSIS cleaning, the readers,
// and whole runs (de-duplication, the split by group, determinism, and that
// `prepare --val-docs V` puts exactly the validation documents in val). No network.
// The last part needs out/vocab (scripts/fetch_vocab.sh) or $HYBRID_VOCAB and PCRE2.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/inflate.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "base/util.h"
#include "tests/expect_death.h"
#include "tests/testing.h"

#define FIX "tests/fixtures/corpus"

static char tmp[64];

static char *tpath(const char *name) {  // tmp/name (static buffer, rotating)
    static char bufs[8][256];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 256, "%s/%s", tmp, name);
    return b;
}

static int buf_is(const Buf *b, const char *want) { return b->len == strlen(want) && !memcmp(b->data, want, b->len); }

// ---- DEFLATE ----
static void test_inflate(void) {
    Buf out = {0};
    // zlib.compress(b"hello"): one fixed-Huffman block
    const uint8_t hello[] = {0x78, 0x9c, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x06, 0x2c, 0x02, 0x15};
    CHECK(inflate_zlib(hello, sizeof hello, &out) == NULL && buf_is(&out, "hello"), "fixed block");
    // back-references (fixed Huffman, distance 3, then 6)
    const uint8_t rep[] = {0x78, 0x9c, 0x4b, 0x4c, 0x4a, 0x4e, 0xc4, 0x40, 0x0a, 0x19, 0xa9, 0x39, 0x39,
                           0xf9, 0xc8, 0x24, 0x00, 0x25, 0xa7, 0x0e, 0xa7};
    out.len = 0;
    CHECK(inflate_zlib(rep, sizeof rep, &out) == NULL && buf_is(&out, "abcabcabcabcabcabcabc hello hello hello"),
          "back-references");
    uint8_t bad[sizeof hello];
    memcpy(bad, hello, sizeof hello);
    bad[sizeof bad - 1] ^= 1;
    out.len = 0;
    const char *err = inflate_zlib(bad, sizeof bad, &out);
    CHECK(err && strstr(err, "Adler-32"), "a wrong checksum is an error: %s", err ? err : "none");
    out.len = 0;
    err = inflate_zlib(hello, 7, &out);
    CHECK(err != NULL, "a truncated stream is an error");
    // a stored block, wrapped by hand: 78 01, BFINAL+type 0, LEN, NLEN, bytes, Adler-32 of "abc"
    const uint8_t stored[] = {0x78, 0x01, 0x01, 0x03, 0x00, 0xfc, 0xff, 'a', 'b', 'c', 0x02, 0x4d, 0x01, 0x27};
    out.len = 0;
    CHECK(inflate_zlib(stored, sizeof stored, &out) == NULL && buf_is(&out, "abc"), "stored block");
    // gzip with a dynamic-Huffman block (gzip -9n of the dictionary fixture)
    size_t zlen, plen;
    char *z = read_file(FIX "/dict/tiny.dict.dz", &zlen), *plain = read_file(FIX "/tiny.dict.txt", &plen);
    CHECK(z && plain && zlen > 11 && ((uint8_t)z[10] >> 1 & 3) == 2, "the gzip fixture holds a dynamic block");
    if (z && plain) {
        out.len = 0;
        CHECK(inflate_gzip((uint8_t *)z, zlen, &out) == NULL && out.len == plen && !memcmp(out.data, plain, plen),
              "gzip with a dynamic block");
        z[zlen / 2] ^= 0x10;
        out.len = 0;
        CHECK(inflate_gzip((uint8_t *)z, zlen, &out) != NULL, "a corrupt gzip file is an error");
    }
    free(z), free(plain);
    buf_free(&out);
}

// ---- the normal form, dictd entries ----
static int normal_is(const char *in, size_t n, const char *want) {
    Buf out = {0};
    corpus_normalize(in, n, &out);
    int ok = buf_is(&out, want);
    if (!ok) fprintf(stderr, "normalize gave [%.*s]\n", (int)out.len, out.data ? out.data : "");
    buf_free(&out);
    return ok;
}
#define NORMAL_IS(in, want) normal_is(in, sizeof(in) - 1, want)

static void test_normalize(void) {
    CHECK(NORMAL_IS("  a \t b\r\n\r\n\n\nc  \n", "a b\n\nc"), "spaces, CRLF, blank lines");
    CHECK(NORMAL_IS("\n\nline one\n  line two\n", "line one\nline two"), "line starts");
    CHECK(NORMAL_IS("x\xb9y \xe2\x80\x9cq\xe2\x80\x9d", "xy \xe2\x80\x9cq\xe2\x80\x9d"), "a stray byte goes, UTF-8 stays");
    CHECK(NORMAL_IS("a\x01\x7f" "b\xed\xa0\x80" "c", "abc"), "control characters and a surrogate go");
    CHECK(NORMAL_IS(" \n \t\n", ""), "nothing but space");
}

static void test_dictd_entry(void) {
    const char *e = "Coagulate \\Co*ag\"u*late\\, v. t. [imp. & p. p. {Coagulated}; p.\n"
                    "   pr. & vb. n. {Coagulating}.]\n"
                    "   To cause (a liquid) to change into a curdlike or semisolid\n"
                    "   state, not by evaporation.\n"
                    "   [1913 Webster]\n"
                    "\n"
                    "   Short line\n"
                    "   of verse,\n"
                    "   a \\n escape\\ stays.\n";
    Buf out = {0};
    corpus_dictd_entry(e, strlen(e), &out);
    const char *want = "Coagulate, v. t. [imp. & p. p. Coagulated; p. pr. & vb. n. Coagulating.]\n"
                       "To cause (a liquid) to change into a curdlike or semisolid state, not by evaporation.\n\n"
                       "Short line\nof verse,\na \\n escape\\ stays.";
    CHECK(buf_is(&out, want), "dictd entry: got [%.*s]", (int)out.len, out.data);
    buf_free(&out);
}

// ---- OSIS ----
typedef struct {
    char ids[16][64], groups[16][64];
    Buf texts[16];
    int n;
} Got;

static void got_emit(void *ctx, const char *id, const char *group, const char *text, size_t len) {
    Got *g = ctx;
    if (g->n == 16) return;
    snprintf(g->ids[g->n], 64, "%s", id);
    snprintf(g->groups[g->n], 64, "%s", group);
    g->texts[g->n].len = 0;
    buf_append(&g->texts[g->n], text, len);
    g->n++;
}

static void got_free(Got *g) {
    for (int i = 0; i < 16; i++) buf_free(&g->texts[i]);
}

static const char OSIS[] =
    "<milestone type=\"x-importer\" n=\"1\"/><div type=\"front\" sID=\"f\"/><title>Preface</title>"
    "<div sID=\"p0\" type=\"x-p\"/>A preface before any book.<div eID=\"p0\" type=\"x-p\"/>"
    "<div canonical=\"true\" osisID=\"Gen\" sID=\"b1\" type=\"book\"/> <title type=\"main\">Genesis</title> "
    "<chapter n=\"1\" osisID=\"Gen.1\" sID=\"Gen.1\"/><w lemma=\"x\">In</w> <w>the</w> <w>beginning</w>, "
    "<w>God</w><note placement=\"foot\"><reference type=\"annotateRef\">1:1</reference>A <hi>note</hi>.</note>"
    "<w>created</w> earth &amp; sky<note type=\"x\">n</note>.<div eID=\"p1\" type=\"x-p\"/>"
    "<lg><l/>A line<l/>and another</lg>"
    "<chapter eID=\"Gen.1\"/><chapter n=\"2\" osisID=\"Gen.2\" sID=\"Gen.2\"/>"
    "<table><row><cell>Outline</cell><cell>(1-3)</cell></row></table>Thus &#8220;it&#x201d; was&nbsp;done.";

static void test_osis(void) {
    Got g = {0};
    corpus_osis_docs(OSIS, sizeof OSIS - 1, got_emit, &g);
    CHECK(g.n == 3, "three documents, got %d", g.n);
    if (g.n == 3) {
        CHECK(!strcmp(g.ids[0], "front1") && !strcmp(g.groups[0], "front:front1"), "front matter: %s", g.ids[0]);
        CHECK(buf_is(&g.texts[0], "Preface\n\nA preface before any book."), "front text [%.*s]", (int)g.texts[0].len,
              g.texts[0].data);
        CHECK(!strcmp(g.ids[1], "Gen.1") && !strcmp(g.groups[1], "bible:Gen.1"), "chapter 1: %s %s", g.ids[1],
              g.groups[1]);
        CHECK(buf_is(&g.texts[1], "Genesis\n\nIn the beginning, God created earth & sky.\n\nA line\nand another"),
              "chapter 1 text [%.*s]", (int)g.texts[1].len, g.texts[1].data);
        CHECK(!strcmp(g.ids[2], "Gen.2") && !strcmp(g.groups[2], "bible:Gen.2"), "chapter 2: %s", g.ids[2]);
        CHECK(buf_is(&g.texts[2], "Outline (1-3)\n\nThus \xe2\x80\x9cit\xe2\x80\x9d was done."),
              "chapter 2 text [%.*s]", (int)g.texts[2].len, g.texts[2].data);
    }
    got_free(&g);
}

// ---- SWORD modules, written here ----
static void put32(Buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_append(b, x, 4);
}

// one zlib stream of stored blocks holding data
static void zlib_stored(Buf *z, const char *data, size_t n) {
    buf_append(z, "\x78\x01", 2);
    size_t pos = 0;
    do {
        size_t len = n - pos < 65535 ? n - pos : 65535;
        uint8_t h[5] = {(uint8_t)(pos + len == n), (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
                        (uint8_t)(~len >> 8)};
        buf_append(z, h, 5);
        buf_append(z, data + pos, len);
        pos += len;
    } while (pos < n);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) a = (a + (uint8_t)data[i]) % 65521, b = (b + a) % 65521;
    uint32_t ad = b << 16 | a;
    uint8_t t[4] = {(uint8_t)(ad >> 24), (uint8_t)(ad >> 16), (uint8_t)(ad >> 8), (uint8_t)ad};
    buf_append(z, t, 4);
}

static void write_buf(const char *path, const Buf *b) { write_file_atomic(path, b->data, b->len); }

// A module in dir whose ot holds the given entries in one block (NULL: an empty slot; "=":
// a link to the previous entry), with 10- or 12-byte verse records.
static void write_module(const char *dir, const char **entries, int n, int rec) {
    mkdir_p(dir);
    Buf block = {0}, zs = {0}, zv = {0}, zz = {0};
    uint32_t off = 0, size = 0;
    for (int i = 0; i < n; i++) {
        if (!entries[i]) off = 0, size = 0;
        else if (strcmp(entries[i], "=")) {
            off = (uint32_t)block.len, size = (uint32_t)strlen(entries[i]);
            buf_append(&block, entries[i], size);
        }
        put32(&zv, 0), put32(&zv, off);
        if (rec == 10) buf_append(&zv, (uint8_t[]){(uint8_t)size, (uint8_t)(size >> 8)}, 2);
        else put32(&zv, size);
    }
    zlib_stored(&zz, block.data, block.len);
    put32(&zs, 0), put32(&zs, (uint32_t)zz.len), put32(&zs, (uint32_t)block.len);
    char p[300];
    snprintf(p, sizeof p, "%s/ot.bzs", dir), write_buf(p, &zs);
    snprintf(p, sizeof p, "%s/ot.bzv", dir), write_buf(p, &zv);
    snprintf(p, sizeof p, "%s/ot.bzz", dir), write_buf(p, &zz);
    buf_free(&block), buf_free(&zs), buf_free(&zv), buf_free(&zz);
}

static const char *BIBLE[] = {
    "<div osisID=\"Gen\" sID=\"b\" type=\"book\"/>",
    "<chapter osisID=\"Gen.1\" sID=\"Gen.1\"/>In the beginning God created the heaven and the earth. ",
    NULL,
    "And the earth was without form, and void. ",
    "<chapter osisID=\"Gen.2\" sID=\"Gen.2\"/>Thus the heavens and the earth were finished, and all the host of them. ",
    "And on the seventh day God ended his work which he had made. "};
static const char *COMMENTARY[] = {
    "<div osisID=\"Gen\" sID=\"b\" type=\"book\"/><chapter osisID=\"Gen.1\" sID=\"Gen.1\"/>",
    "<div sID=\"p\" type=\"x-p\"/>The first verse of the Bible gives us a satisfying account of the origin of all things.<div eID=\"p\" type=\"x-p\"/>",
    "=",  // linked: the same comment for the next verse, read once
    "<chapter osisID=\"Gen.2\" sID=\"Gen.2\"/><div sID=\"q\" type=\"x-p\"/>The seventh day is the sabbath.<div eID=\"q\" type=\"x-p\"/>"};

static void sword_child(void *dir) {
    Got g = {0};
    corpus_read_sword(dir, got_emit, &g);
}

static void test_sword(void) {
    write_module(tpath("kjv10"), BIBLE, 6, 10);
    write_module(tpath("kjv12"), BIBLE, 6, 12);
    Got a = {0}, b = {0};
    corpus_read_sword(tpath("kjv10"), got_emit, &a);
    corpus_read_sword(tpath("kjv12"), got_emit, &b);
    CHECK(a.n == 2 && b.n == 2, "two chapters: %d, %d", a.n, b.n);
    if (a.n == 2 && b.n == 2) {
        CHECK(!strcmp(a.ids[0], "Gen.1") && !strcmp(a.ids[1], "Gen.2"), "ids %s %s", a.ids[0], a.ids[1]);
        CHECK(buf_is(&a.texts[0], "In the beginning God created the heaven and the earth. And the earth was without "
                                  "form, and void."),
              "Gen.1 [%.*s]", (int)a.texts[0].len, a.texts[0].data);
        CHECK(a.texts[1].len == b.texts[1].len && !memcmp(a.texts[1].data, b.texts[1].data, a.texts[1].len),
              "10- and 12-byte records read the same");
    }
    got_free(&a), got_free(&b);
    write_module(tpath("comm"), COMMENTARY, 4, 10);
    Got c = {0};
    corpus_read_sword(tpath("comm"), got_emit, &c);
    CHECK(c.n == 2 && buf_is(&c.texts[0], "The first verse of the Bible gives us a satisfying account of the origin of "
                                          "all things."),
          "a linked entry is read once: [%.*s]", c.n ? (int)c.texts[0].len : 0, c.n ? c.texts[0].data : "");
    got_free(&c);
    // a record that points past its block
    write_module(tpath("bad"), BIBLE, 6, 10);
    char p[300];
    snprintf(p, sizeof p, "%s/ot.bzv", tpath("bad"));
    size_t n;
    char *v = read_file(p, &n);
    v[7] = 0x7f;  // the high byte of entry 0's offset
    write_file_atomic(p, v, n);
    free(v);
    CHECK(expect_death(sword_child, tpath("bad"), "bad record", "neither 10- nor 12-byte verse records fit"),
          "a broken index is refused");
    CHECK(expect_death(sword_child, tpath("nothing"), "no module", "no SWORD module"), "a folder without a module");
}

// ---- whole runs ----
static void corpus_child(void *argv) {
    char **a = argv;
    int n = 0;
    while (a[n]) n++;
    exit(corpus_main(n, a));
}

static int run_corpus(char **argv) {  // in a child, so die() ends only it; 1 if it succeeded
    char *err = NULL;
    int st = run_forked(corpus_child, argv, 60, &err);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) fprintf(stderr, "corpus failed: %s\n", err ? err : "");
    free(err);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// the "id" and "split" of each line, and the val lines into val_path
typedef struct {
    char id[32][64];
    int val[32];
    int n;
} Lines;

static void read_lines(const char *path, Lines *l, const char *val_path) {
    size_t len;
    char *s = read_file(path, &len);
    Buf val = {0};
    l->n = 0;
    for (char *p = s; p && *p && l->n < 32;) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        char *id = strstr(p, "{\"id\":\"");
        if (id == p) {
            id += 7;
            size_t k = 0;
            while (id[k] != '"' && k < 63) l->id[l->n][k] = id[k], k++;
            l->id[l->n][k] = 0;
            l->val[l->n] = !strncmp(id + k, "\",\"split\":\"val\"", 15);
            if (l->val[l->n]) buf_append(&val, p, n);
            l->n++;
        }
        p += n;
    }
    if (val_path) write_file_atomic(val_path, val.data ? val.data : "", val.len);
    buf_free(&val);
    free(s);
}

static int find(const Lines *l, const char *id) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->id[i], id)) return i;
    return -1;
}

static char *shard_tokens(const char *path, size_t *n) {  // the payload after the 1024-byte header
    size_t len;
    char *s = read_file(path, &len);
    if (!s || len < 1024) {
        free(s);
        *n = 0;
        return NULL;
    }
    memmove(s, s + 1024, len - 1024);
    *n = len - 1024;
    return s;
}

static void prepare_child(void *argv) {
    char **a = argv;
    int n = 0;
    while (a[n]) n++;
    exit(prepare_main(n, a));
}

static void test_runs(void) {
    write_module(tpath("m/kjv"), BIBLE, 6, 10);
    write_module(tpath("m/comm"), COMMENTARY, 4, 10);
    char src[7][300];
    snprintf(src[0], 300, "sword:kjv=%s", tpath("m/kjv"));
    snprintf(src[1], 300, "sword:comm=%s", tpath("m/comm"));
    snprintf(src[2], 300, "dictd:dict=" FIX "/dict/tiny");
    snprintf(src[3], 300, "text:sotu=" FIX "/text");
    snprintf(src[4], 300, "json:fb=" FIX "/json");
    char out1[300], out2[300];
    snprintf(out1, 300, "%s", tpath("one.jsonl"));
    snprintf(out2, 300, "%s", tpath("two.jsonl"));
    char *argv1[] = {"corpus", "--val-frac", "0.5", "--out", out1, src[0], src[1], src[2], src[3], src[4], NULL};
    char *argv2[] = {"corpus", "--val-frac", "0.5", "--out", out2, src[0], src[1], src[2], src[3], src[4], NULL};
    CHECK(run_corpus(argv1) && run_corpus(argv2), "two runs");
    size_t n1, n2;
    char *a = read_file(out1, &n1), *b = read_file(out2, &n2);
    CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "the same inputs give the same bytes");
    Lines l;
    read_lines(out1, &l, tpath("val.jsonl"));
    // kjv Gen.1 Gen.2, comm Gen.1 Gen.2, dict coa amt, sotu a b (c repeats a), fb europe/ru
    CHECK(l.n == 9, "9 documents, got %d", l.n);
    const char *ids[] = {"kjv:Gen.1", "kjv:Gen.2", "comm:Gen.1", "comm:Gen.2", "dict:coa",
                         "dict:amt",  "sotu:a",    "sotu:b",     "fb:europe/ru"};
    for (int i = 0; i < 9; i++) CHECK(find(&l, ids[i]) >= 0, "%s is in the output", ids[i]);
    CHECK(find(&l, "sotu:c") < 0, "a repeated document (up to spaces and line ends) is dropped");
    int k1 = find(&l, "kjv:Gen.1"), c1 = find(&l, "comm:Gen.1"), k2 = find(&l, "kjv:Gen.2"),
        c2 = find(&l, "comm:Gen.2");
    CHECK(k1 >= 0 && c1 >= 0 && l.val[k1] == l.val[c1], "a chapter's Bible text and commentary share a split");
    CHECK(k2 >= 0 && c2 >= 0 && l.val[k2] == l.val[c2], "so do those of chapter 2");
    int nval = 0;
    for (int i = 0; i < l.n; i++) nval += l.val[i];
    CHECK(nval > 0 && nval < l.n, "both splits hold documents at --val-frac 0.5: %d of %d", nval, l.n);
    // the paragraph that b.txt repeats (in capitals) is gone; its own text stays
    const char *bt = a ? strstr(a, "\"sotu:b\"") : NULL;
    const char *bend = bt ? strchr(bt, '\n') : NULL;
    CHECK(bt && bend, "sotu:b present");
    if (bt && bend) {
        size_t n = (size_t)(bend - bt);
        char *line = xmalloc(n + 1);
        memcpy(line, bt, n);
        line[n] = 0;
        CHECK(strstr(line, "A different opening line") && strstr(line, "Short one.") && !strstr(line, "THE FIRST PARAGRAPH"),
              "paragraph de-duplication: %s", line);
        free(line);
    }
    CHECK(a && strstr(a, "Ruritania") && strstr(a, "walker goes into arrays") && !strstr(a, "12,345") &&
              !strstr(a, "Short."),
          "json: long texts kept, figures left out");
    CHECK(a && strstr(a, "Coagulate, v. t.") && !strstr(a, "1913 Webster") && !strstr(a, "tiny test dictionary"),
          "dictd: cleaned, its own description left out");
    free(a), free(b);
    // prepare --val-docs V takes exactly the validation documents, in order
    if (!tokenizer_can_encode()) return;
    char vd[16];
    snprintf(vd, sizeof vd, "%d", nval);
    char o1[300], o2[300], vpath[300];
    snprintf(o1, 300, "%s", tpath("s1"));
    snprintf(o2, 300, "%s", tpath("s2"));
    snprintf(vpath, 300, "%s", tpath("val.jsonl"));
    const char *vocab = getenv("HYBRID_VOCAB") ? getenv("HYBRID_VOCAB") : TOKENIZER_DEFAULT_DIR;
    char *p1[] = {"prepare", "--quiet", "--vocab", (char *)vocab, "--format", "jsonl", "--name", "c", "--out", o1,
                  "--val-docs", vd, out1, NULL};
    char *p2[] = {"prepare", "--quiet", "--vocab", (char *)vocab, "--format", "jsonl", "--name", "v", "--out", o2,
                  "--val-docs", "0", vpath, NULL};
    char *err = NULL;
    int st1 = run_forked(prepare_child, p1, 60, &err);
    free(err), err = NULL;
    int st2 = run_forked(prepare_child, p2, 60, &err);
    free(err);
    CHECK(WIFEXITED(st1) && !WEXITSTATUS(st1) && WIFEXITED(st2) && !WEXITSTATUS(st2), "prepare runs");
    char s1[340], s2[340];
    snprintf(s1, sizeof s1, "%s/c_val_000000.bin", o1);
    snprintf(s2, sizeof s2, "%s/v_train_000000.bin", o2);
    size_t t1, t2;
    char *x = shard_tokens(s1, &t1), *y = shard_tokens(s2, &t2);
    CHECK(x && y && t1 == t2 && !memcmp(x, y, t1), "prepare's val shard holds exactly the validation documents (%zu, %zu bytes)",
          t1, t2);
    free(x), free(y);
}

static void test_errors(void) {
    CHECK(expect_death(corpus_child, (char *[]){"corpus", "--out", tpath("x"), "nope:a=b", NULL}, "kind",
                       "unknown kind \"nope\""),
          "an unknown kind");
    CHECK(expect_death(corpus_child, (char *[]){"corpus", "--out", tpath("x"), "text:a", NULL}, "syntax",
                       "KIND:NAME=PATH"),
          "a source without =PATH");
    CHECK(expect_death(corpus_child,
                       (char *[]){"corpus", "--out", tpath("x"), "text:a=" FIX "/text", "text:a=" FIX "/text", NULL},
                       "twice", "two sources named \"a\""),
          "a name used twice");
    CHECK(expect_death(corpus_child, (char *[]){"corpus", "--val-frac", "0.9", "--out", tpath("x"), "text:a=" FIX "/text", NULL},
                       "frac", "--val-frac needs a number from 0 to 0.5"),
          "a split fraction out of range");
    CHECK(expect_death(corpus_child, (char *[]){"corpus", "--out", tpath("x"), "dictd:d=" FIX "/dict/none", NULL},
                       "missing dict", "none.index: cannot read"),
          "a missing dictd index");
}

int main(void) {
    strcpy(tmp, "/tmp/hybrid_corpus_XXXXXX");
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    test_inflate();
    test_normalize();
    test_dictd_entry();
    test_osis();
    test_sword();
    test_errors();
    test_runs();
    remove_tree(tmp);
    if (!tokenizer_can_encode()) {
        printf("%s: %d checks passed, %d failed\n", __FILE__, g_checks_passed, g_checks_failed);
        if (g_checks_failed) return 1;
        TEST_MAIN_SKIP("test_corpus's prepare check: this build has no PCRE2 (Debian: libpcre2-dev)");
    }
    TEST_MAIN_END();
}
