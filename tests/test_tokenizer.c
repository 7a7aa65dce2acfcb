// GPT-2 tokenizer: known answers against a reference encoder, round trips on arbitrary
// bytes, the invalid-UTF-8 rule, the merge loop against encoder.py's, and the errors.
// Needs out/vocab/{encoder.json,vocab.bpe} (scripts/fetch_vocab.sh) or $HYBRID_VOCAB.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/buf.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "base/rng.h"
#include "base/util.h"
#include "tests/expect_death.h"
#include "tests/testing.h"

static const char *vocab_dir(void) {
    const char *d = getenv("HYBRID_VOCAB");
    return d ? d : TOKENIZER_DEFAULT_DIR;
}

static int ids_equal(const int *a, size_t na, const int *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof(int)) == 0);
}

static void print_ids(const char *label, const int *ids, size_t n) {
    fprintf(stderr, "    %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

// encode(text) == want, printing both on a mismatch
static int check_encode(Encoder *e, const char *text, size_t len, int flags, const int *want, size_t nwant) {
    TokenVec got = {0};
    encoder_encode(e, text, len, flags, &got);
    int ok = ids_equal(got.ids, got.n, want, nwant);
    if (!ok) {
        fprintf(stderr, "  mismatch for %zu bytes \"%.*s\"\n", len, (int)(len < 80 ? len : 80), text);
        print_ids("want", want, nwant);
        print_ids("got ", got.ids, got.n);
    }
    tokenvec_free(&got);
    return ok;
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

// tests/fixtures/gpt2_tokens.txt: "SOURCE SPECIAL HEX : IDS" per line (see its generator)
static void test_fixture(Encoder *e) {
    const char *path = "tests/fixtures/gpt2_tokens.txt";
    size_t size;
    char *text = read_file(path, &size);
    CHECK(text != NULL, "%s: missing", path);
    if (!text) return;
    int cases = 0, fixed = 0;
    Buf bytes = {0};
    int *want = xmalloc(size * sizeof(int));
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char source[16], hex_start;
        int special, used;
        if (sscanf(line, "%15s %d %c%n", source, &special, &hex_start, &used) != 3) {
            CHECK(0, "%s: bad line %s", path, line);
            continue;
        }
        char *p = line + used - 1;
        bytes.len = 0;
        for (; hexval(p[0]) >= 0 && hexval(p[1]) >= 0; p += 2)
            buf_putc(&bytes, (char)(hexval(p[0]) * 16 + hexval(p[1])));
        size_t n = 0;
        CHECK(strncmp(p, " : ", 3) == 0, "%s: bad line %s", path, line);
        for (char *q = p + 3, *end; (want[n] = (int)strtol(q, &end, 10)), end != q; q = end) n++;
        CHECK(check_encode(e, bytes.data, bytes.len, special ? TOKENIZER_ALLOW_EOT : 0, want, n),
              "fixture case %d (%s)", cases + 1, source);
        cases++;
        fixed += strcmp(source, "fixed") == 0;
    }
    CHECK(cases >= 300 && fixed >= 2, "fixture has %d cases, %d fixed", cases, fixed);
    printf("fixture: %d reference cases\n", cases);
    free(want);
    buf_free(&bytes);
    free(text);
}

// Ids published elsewhere: the GPT-2 examples everyone quotes and tiktoken's README.
static void test_known_ids(const Tokenizer *t, Encoder *e) {
    CHECK(tokenizer_vocab_size(t) == 50257, "vocab size %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_eot(t) == 50256, "eot %d", tokenizer_eot(t));
    CHECK(check_encode(e, "Hello world", 11, 0, (int[]){15496, 995}, 2), "Hello world");
    CHECK(check_encode(e, "hello world", 11, 0, (int[]){31373, 995}, 2), "hello world (tiktoken README)");
    CHECK(check_encode(e, "\n", 1, 0, (int[]){198}, 1), "newline");
    CHECK(check_encode(e, " ", 1, 0, (int[]){220}, 1), "space");
    CHECK(check_encode(e, "<|endoftext|>", 13, TOKENIZER_ALLOW_EOT, (int[]){50256}, 1), "EOT as special");
    // as plain text: < | end of text | >
    CHECK(check_encode(e, "<|endoftext|>", 13, 0, (int[]){27, 91, 437, 1659, 5239, 91, 29}, 7), "EOT as text");
    CHECK(check_encode(e, "", 0, 0, NULL, 0), "empty");
}

static int round_trips(const Tokenizer *t, Encoder *e, const char *s, size_t len, int flags) {
    TokenVec ids = {0};
    encoder_encode(e, s, len, flags, &ids);
    size_t n;
    char *back = tokenizer_decode(t, ids.ids, ids.n, &n);
    int ok = n == len && memcmp(back, s, len) == 0;
    for (size_t i = 0; i < ids.n; i++) ok &= ids.ids[i] >= 0 && ids.ids[i] < tokenizer_vocab_size(t);
    free(back);
    tokenvec_free(&ids);
    return ok;
}

// Valid UTF-8 fragments for random text.
static const char *FRAGMENTS[] = {
    "a", "Z", "the", " the", "ing", "0", "42", ",", ".", "'", "'s", "'ll", " ", "  ", "\t", "\n", "\n\n", "\r\n",
    "\xc2\xa0", "\xe3\x80\x80", "\xc3\xa9", "\xce\xb1", "\xd0\xb6", "\xe4\xb8\xad", "\xe3\x81\xae", "\xed\x95\x9c",
    "\xf0\x9f\x98\x80", "\xf0\x9f\x91\x8d", "\xe2\x80\x8d", "\xd9\xa3", "\xe2\x85\xab", "\xc2\x85", "\xef\xbb\xbf",
    "<|endoftext|>", "e\xcc\x81", "\xe2\x82\xac"};
#define NFRAG (sizeof(FRAGMENTS) / sizeof(FRAGMENTS[0]))

static void random_valid(Rng *r, Buf *b, int nfrag) {
    for (int i = 0; i < nfrag; i++) {
        const char *f = FRAGMENTS[rng_below(r, NFRAG)];
        buf_append(b, f, strlen(f));
    }
}

// Bytes that are invalid UTF-8 wherever they stand after a complete character:
// continuation bytes, C0/C1 (overlong leads) and F5..FF.
static void random_invalid(Rng *r, Buf *b, int n) {
    static const unsigned char bad[] = {0x80, 0x8f, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xf5, 0xf8, 0xfe, 0xff};
    for (int i = 0; i < n; i++) buf_putc(b, (char)bad[rng_below(r, sizeof(bad))]);
}

static void test_round_trip(const Tokenizer *t, Encoder *e) {
    Rng r;
    rng_seed(&r, 1);
    Buf b = {0};
    int fails = 0;
    for (int k = 0; k < 3000; k++) {
        b.len = 0;
        int kind = k % 3;
        size_t n = rng_below(&r, 400);
        if (kind == 0) {  // uniform random bytes
            for (size_t i = 0; i < n; i++) buf_putc(&b, (char)rng_below(&r, 256));
        } else if (kind == 1) {  // valid text
            random_valid(&r, &b, (int)n / 4);
        } else {  // text with invalid bytes and truncated sequences mixed in
            for (size_t i = 0; i < n / 8; i++) {
                random_valid(&r, &b, 3);
                if (rng_below(&r, 2)) random_invalid(&r, &b, 1 + (int)rng_below(&r, 3));
                else buf_append(&b, "\xe2\x82", 1 + rng_below(&r, 2));  // a cut-off euro sign
            }
        }
        fails += !round_trips(t, e, b.data, b.len, k & 1 ? TOKENIZER_ALLOW_EOT : 0);
    }
    CHECK(fails == 0, "%d of 3000 random byte strings do not round-trip", fails);
    // long runs: one piece of a million bytes (BPE is O(n log n)), whitespace runs
    size_t big = 1 << 20;
    char *s = xmalloc(big);
    const char fills[] = {'a', ' ', '\n', '7', '!', (char)0x80};
    for (size_t f = 0; f < sizeof(fills); f++) {
        memset(s, fills[f], big);
        CHECK(round_trips(t, e, s, big, 0), "1 MiB of byte 0x%02x", (unsigned char)fills[f]);
    }
    free(s);
    buf_free(&b);
}

// encode(A X B) == encode(A) + encode(X) + encode(B) for valid A, B and an invalid run X.
static void test_invalid_utf8_rule(Encoder *e) {
    Rng r;
    rng_seed(&r, 2);
    Buf a = {0}, x = {0}, bb = {0}, all = {0};
    int fails = 0;
    for (int k = 0; k < 2000; k++) {
        a.len = x.len = bb.len = all.len = 0;
        random_valid(&r, &a, (int)rng_below(&r, 12));
        if (k % 4 == 0) buf_append(&x, "\xe2\x82", 2);  // truncated sequence; B must not continue it
        else random_invalid(&r, &x, 1 + (int)rng_below(&r, 6));
        random_valid(&r, &bb, (int)rng_below(&r, 12));
        if (k % 4 == 0 && bb.len > 0 && ((unsigned char)bb.data[0] & 0xC0) == 0x80) continue;
        buf_append(&all, a.data, a.len), buf_append(&all, x.data, x.len), buf_append(&all, bb.data, bb.len);
        TokenVec whole = {0}, parts = {0};
        encoder_encode(e, all.data, all.len, 0, &whole);
        encoder_encode(e, a.data, a.len, 0, &parts);
        encoder_encode(e, x.data, x.len, 0, &parts);
        encoder_encode(e, bb.data, bb.len, 0, &parts);
        fails += !ids_equal(whole.ids, whole.n, parts.ids, parts.n);
        tokenvec_free(&whole), tokenvec_free(&parts);
    }
    CHECK(fails == 0, "%d of 2000 cases break encode(A X B) == encode(A) encode(X) encode(B)", fails);
    // an invalid run is one BPE piece: "\x80\x80" is not two single-byte tokens if a merge joins them
    TokenVec v = {0};
    encoder_encode(e, "\xe2\x80", 2, 0, &v);  // GPT-2 has the token for bytes e2 80
    CHECK(v.n == 1, "\\xe2\\x80 gives %zu tokens, expected 1 (one piece)", v.n);
    tokenvec_free(&v);
    buf_free(&a), buf_free(&x), buf_free(&bb), buf_free(&all);
}

// encoder.py's merge loop, literally: find the best-ranked pair, merge all its
// occurrences left to right, repeat. O(n^2); the reference for bpe_piece.
static size_t naive_bpe(const Tokenizer *t, const unsigned char *s, size_t n, int *out) {
    for (size_t i = 0; i < n; i++) out[i] = t->byte_token[s[i]];
    for (;;) {
        int best = -1, best_rank = 0, rank, merged, best_merged = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (merge_lookup(t, out[i], out[i + 1], &rank, &merged) && (best < 0 || rank < best_rank))
                best = (int)i, best_rank = rank, best_merged = merged;
        if (best < 0) return n;
        int a = out[best], b = out[best + 1];
        size_t m = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && out[i] == a && out[i + 1] == b) out[m++] = best_merged, i += 2;
            else out[m++] = out[i++];
        }
        n = m;
    }
}

static void test_bpe_matches_encoder_py(const Tokenizer *t) {
    Rng r;
    rng_seed(&r, 3);
    BpeWork w = {0};
    const char *alphabets[] = {"aeiourstnl", "ab", "a", " \n", "0123456789", "!?.,\"'"};
    unsigned char s[3000];
    int ref[3000], fails = 0;
    for (int k = 0; k < 600; k++) {
        const char *al = alphabets[k % 6];
        size_t n = 1 + rng_below(&r, k % 10 == 0 ? 3000 : 40), m = strlen(al);
        for (size_t i = 0; i < n; i++)  // every 7th piece: arbitrary bytes
            s[i] = k % 7 == 6 ? (unsigned char)rng_below(&r, 256) : (unsigned char)al[rng_below(&r, m)];
        TokenVec got = {0};
        bpe_piece(t, &w, s, n, &got);
        size_t nref = naive_bpe(t, s, n, ref);
        fails += !ids_equal(got.ids, got.n, ref, nref);
        tokenvec_free(&got);
    }
    CHECK(fails == 0, "%d of 600 pieces: heap BPE differs from encoder.py's loop", fails);
    bpe_work_free(&w);
}

// Cutting at tokenizer_split_point never changes the encoding.
static void test_split_point(Encoder *e) {
    Rng r;
    rng_seed(&r, 4);
    Buf b = {0};
    int fails = 0, cuts = 0;
    for (int k = 0; k < 500; k++) {
        b.len = 0;
        random_valid(&r, &b, 5 + (int)rng_below(&r, 60));
        size_t p = tokenizer_split_point(b.data, b.len, rng_below(&r, b.len + 1));
        if (p == b.len) continue;
        CHECK(p > 0 && b.data[p] == '\n', "split point %zu", p);
        cuts++;
        TokenVec whole = {0}, parts = {0};
        encoder_encode(e, b.data, b.len, TOKENIZER_ALLOW_EOT, &whole);
        encoder_encode(e, b.data, p, TOKENIZER_ALLOW_EOT, &parts);
        encoder_encode(e, b.data + p, b.len - p, TOKENIZER_ALLOW_EOT, &parts);
        fails += !ids_equal(whole.ids, whole.n, parts.ids, parts.n);
        tokenvec_free(&whole), tokenvec_free(&parts);
    }
    CHECK(cuts > 100 && fails == 0, "%d of %d cuts change the encoding", fails, cuts);
    buf_free(&b);
}

static void test_decode_api(const Tokenizer *t) {
    int ids[] = {15496, 995, 50256};
    char buf[8];
    size_t n = tokenizer_decode_to(t, ids, 3, buf, sizeof(buf));
    CHECK(n == 24 && memcmp(buf, "Hello wo", 8) == 0, "decode_to truncates and returns the full length (%zu)", n);
    CHECK(tokenizer_decode_to(t, ids, 3, NULL, 0) == 24, "decode_to sizing call");
    size_t len;
    char *s = tokenizer_decode(t, ids, 3, &len);
    CHECK(len == 24 && strcmp(s, "Hello world<|endoftext|>") == 0, "decode: %s", s);
    free(s);
    const char *b = tokenizer_token_bytes(t, 220, &len);
    CHECK(b && len == 1 && b[0] == ' ', "token 220 is a space");
    CHECK(tokenizer_token_bytes(t, 50257, &len) == NULL && tokenizer_token_bytes(t, -1, &len) == NULL, "out of range");
}

static void test_encode_api(const Tokenizer *t) {  // the one-off call and the flag
    size_t n;
    int *v = tokenizer_encode(t, "a<|endoftext|>b", 15, TOKENIZER_ALLOW_EOT, &n);
    CHECK(n == 3 && v[1] == 50256, "tokenizer_encode with the EOT flag");
    free(v);
}

static void new_encoder(void *t) { encoder_new(t); }

// ---- errors (each in a forked child) ----
static char tmpdir[64];

static void write_text(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    write_file_atomic(path, text, strlen(text));
}

static void load_pair(void *names) {
    const char **n = names;
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s/%s", tmpdir, n[0]);
    snprintf(b, sizeof(b), "%s/%s", tmpdir, n[1]);
    tokenizer_load(n[0][0] == '/' ? n[0] : a, n[1][0] == '/' ? n[1] : b);
}

static void decode_bad_id(void *t) { tokenizer_decode_to(t, (int[]){50257}, 1, NULL, 0); }

static void test_errors(const Tokenizer *t) {
    strcpy(tmpdir, "/tmp/hybrid_tok_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    char good_enc[256], good_bpe[256];
    snprintf(good_enc, sizeof(good_enc), "%s/encoder.json", vocab_dir());
    snprintf(good_bpe, sizeof(good_bpe), "%s/vocab.bpe", vocab_dir());
    char abs_enc[512], abs_bpe[512];
    CHECK(realpath(good_enc, abs_enc) && realpath(good_bpe, abs_bpe), "realpath");
    write_text("trunc.json", "{\"a\": 0, \"b\": 1");
    write_text("notjson.json", "<html>not found</html>");
    write_text("badid.json", "{\"a\": 0, \"b\": 5}");
    write_text("badchar.json", "{\"a b\": 0}");
    write_text("bad.bpe", "#version: 0.2\n\xc4\xa0 t\nnot_a_token x\n");
    write_text("noversion.bpe", "\xc4\xa0 t\n");
    size_t len;
    char *real = read_file(good_bpe, &len), *cut = real;
    for (int i = 0; i < 1000; i++) cut = strchr(cut, '\n') + 1;  // the first 999 merges
    *cut = 0;
    write_text("short.bpe", real);
    free(real);
    CHECK(expect_death(load_pair, (const char *[]){"missing.json", abs_bpe}, "missing encoder.json", "missing.json",
                       "cannot open"), "missing encoder.json");
    CHECK(expect_death(load_pair, (const char *[]){abs_enc, "missing.bpe"}, "missing vocab.bpe", "missing.bpe",
                       "cannot open"), "missing vocab.bpe");
    CHECK(expect_death(load_pair, (const char *[]){"trunc.json", abs_bpe}, "truncated", "trunc.json", "corrupt"),
          "truncated encoder.json");
    CHECK(expect_death(load_pair, (const char *[]){"notjson.json", abs_bpe}, "not JSON", "notjson.json", "byte 0"),
          "encoder.json that is not JSON");
    CHECK(expect_death(load_pair, (const char *[]){"badid.json", abs_bpe}, "bad ids", "badid.json", "ids"),
          "encoder.json with a gap in the ids");
    CHECK(expect_death(load_pair, (const char *[]){"badchar.json", abs_bpe}, "bad char", "badchar.json", "alphabet"),
          "encoder.json with a raw space");
    CHECK(expect_death(load_pair, (const char *[]){abs_enc, "bad.bpe"}, "bad merge", "bad.bpe:3", "not_a_token"),
          "vocab.bpe with an unknown token, naming file:line");
    CHECK(expect_death(load_pair, (const char *[]){abs_enc, "noversion.bpe"}, "no version", "noversion.bpe",
                       "#version"), "vocab.bpe without its header");
    CHECK(expect_death(load_pair, (const char *[]){abs_enc, "short.bpe"}, "cut short", "short.bpe", "999 merges"),
          "vocab.bpe cut short at a line end");
    CHECK(expect_death(decode_bad_id, (void *)t, "bad id", "50257"), "decoding an id outside the vocabulary");
    remove_tree(tmpdir);
}

int main(void) {
    char enc_path[256];
    snprintf(enc_path, sizeof(enc_path), "%s/encoder.json", vocab_dir());
    if (!file_exists(enc_path)) {
        fprintf(stderr, "%s missing: run scripts/fetch_vocab.sh (make test does)\n", enc_path);
        return 1;
    }
    Tokenizer *t = tokenizer_load_dir(vocab_dir());
    test_decode_api(t);
    test_errors(t);
    if (!tokenizer_can_encode()) {  // a build without PCRE2 decodes, and says why it cannot encode
        CHECK(expect_death(new_encoder, t, "no PCRE2", "needs PCRE2", "libpcre2-dev"), "encoder_new without PCRE2");
        tokenizer_free(t);
        TEST_MAIN_SKIP("encoding: this build has no PCRE2, only decoding and the encoder's error message were tested "
                       "(Debian: libpcre2-dev)");
    }
    Encoder *e = encoder_new(t);
    test_fixture(e);
    test_known_ids(t, e);
    test_round_trip(t, e);
    test_invalid_utf8_rule(e);
    test_bpe_matches_encoder_py(t);
    test_split_point(e);
    test_encode_api(t);
    encoder_free(e);
    tokenizer_free(t);
    TEST_MAIN_END();
}
