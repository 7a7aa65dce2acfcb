// Encoding: pre-split with the GPT-2 pattern (PCRE2), then BPE each piece, with a
// cache of pieces already seen (most words repeat).
#include <stdlib.h>
#include <string.h>

#include "data/strmap.h"
#include "data/tokenizer_impl.h"
#include "base/util.h"

// Encodes text without looking for special tokens (defined below, per build).
static void encode_ordinary(Encoder *e, const char *bytes, size_t len, TokenVec *out);

size_t tokenizer_split_point(const char *bytes, size_t len, size_t from) {
    for (size_t p = from > 1 ? from : 1; p < len; p++) {
        const char *nl = memchr(bytes + p, '\n', len - p);
        if (!nl) return len;
        p = (size_t)(nl - bytes);
        unsigned char c = (unsigned char)bytes[p - 1];
        if (c >= 0x21 && c <= 0x7E) return p;
    }
    return len;
}

static const char EOT_TEXT[] = "<|endoftext|>";
#define EOT_LEN (sizeof(EOT_TEXT) - 1)

static const char *find_eot(const char *s, size_t len) {
    for (const char *end = s + len; (size_t)(end - s) >= EOT_LEN;) {
        const char *lt = memchr(s, '<', (size_t)(end - s) - EOT_LEN + 1);
        if (!lt) return NULL;
        if (memcmp(lt, EOT_TEXT, EOT_LEN) == 0) return lt;
        s = lt + 1;
    }
    return NULL;
}

#ifdef HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// GPT-2's pattern with \s spelled out as Unicode White_Space, the meaning it has in
// Python's `regex` module (which OpenAI used) and in tiktoken (Rust regex). PCRE2's own
// \s would add U+180E; JavaScript's would add U+FEFF and drop U+0085.
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

// Pieces up to this many bytes are cached; the cache is emptied when it holds this
// many pieces (memory stays bounded on any input).
#define CACHE_MAX_PIECE 64
#define CACHE_MAX_ENTRIES (1u << 20)

struct Encoder {
    const Tokenizer *tok;
    pcre2_code *re;
    pcre2_match_data *md;
    StrMap cache;      // piece bytes -> (id << 8 | 1) for one token, else (offset into cache_ids << 8 | count)
    TokenVec cache_ids;
    TokenVec scratch;
    BpeWork work;
};

int tokenizer_can_encode(void) { return 1; }

Encoder *encoder_new(const Tokenizer *t) {
    Encoder *e = xcalloc(1, sizeof(Encoder));
    e->tok = t;
    int errcode;
    PCRE2_SIZE erroff;
    // MATCH_INVALID_UTF: bytes that are not well-formed UTF-8 never match, so the
    // pattern skips them and they become pieces of their own (see tokenizer.h).
    e->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, NULL);
    if (!e->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        die("tokenizer: PCRE2 rejects the GPT-2 pattern at offset %zu: %s", (size_t)erroff, (char *)msg);
    }
    pcre2_jit_compile(e->re, PCRE2_JIT_COMPLETE);  // if JIT is unavailable, the interpreter runs
    e->md = pcre2_match_data_create_from_pattern(e->re, NULL);
    strmap_init(&e->cache, 1 << 16);
    return e;
}

void encoder_free(Encoder *e) {
    if (!e) return;
    pcre2_match_data_free(e->md);
    pcre2_code_free(e->re);
    strmap_free(&e->cache);
    tokenvec_free(&e->cache_ids);
    tokenvec_free(&e->scratch);
    bpe_work_free(&e->work);
    free(e);
}

static void encode_piece(Encoder *e, const char *s, size_t n, TokenVec *out) {
    if (n > CACHE_MAX_PIECE) {
        bpe_piece(e->tok, &e->work, (const unsigned char *)s, n, out);
        return;
    }
    uint64_t v;
    if (strmap_get(&e->cache, s, n, &v)) {
        if ((v & 0xFF) == 1) tokenvec_push(out, (int)(v >> 8));  // most pieces are one token
        else tokenvec_append(out, e->cache_ids.ids + (v >> 8), v & 0xFF);
        return;
    }
    if (e->cache.count >= CACHE_MAX_ENTRIES) {
        strmap_clear(&e->cache);
        e->cache_ids.n = 0;
    }
    e->scratch.n = 0;
    bpe_piece(e->tok, &e->work, (const unsigned char *)s, n, &e->scratch);
    tokenvec_append(out, e->scratch.ids, e->scratch.n);
    if (e->scratch.n == 1) {
        strmap_put(&e->cache, s, n, (uint64_t)e->scratch.ids[0] << 8 | 1);
        return;
    }
    uint64_t off = e->cache_ids.n;
    tokenvec_append(&e->cache_ids, e->scratch.ids, e->scratch.n);
    strmap_put(&e->cache, s, n, off << 8 | e->scratch.n);
}

static void encode_ordinary(Encoder *e, const char *bytes, size_t len, TokenVec *out) {
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(e->re, (PCRE2_SPTR)bytes, len, pos, 0, e->md, NULL);
        size_t start = len, end = len;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            start = ov[0], end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            die("tokenizer: PCRE2 match failed at byte %zu: %s", pos, (char *)msg);
        }
        if (start > pos) encode_piece(e, bytes + pos, start - pos, out);  // invalid UTF-8 bytes
        if (end > start) encode_piece(e, bytes + start, end - start, out);
        pos = end;
    }
}

#else  // no PCRE2: decoding works, encoding says what is missing

struct Encoder {
    const Tokenizer *tok;
};

int tokenizer_can_encode(void) { return 0; }

Encoder *encoder_new(const Tokenizer *t) {
    (void)t;
    die("encoding text needs PCRE2, which this build of hybrid lacks: install it (Debian/Ubuntu: apt-get install "
        "libpcre2-dev) and rebuild (make clean && make); decoding works without it");
}

void encoder_free(Encoder *e) { free(e); }

static void encode_ordinary(Encoder *e, const char *bytes, size_t len, TokenVec *out) {
    (void)e, (void)bytes, (void)len, (void)out;
}

#endif

// "<|endoftext|>" becomes the EOT id only if asked; the text around it is encoded
// as usual, like tiktoken's encode(text, allowed_special={"<|endoftext|>"}).
size_t encoder_encode(Encoder *e, const char *bytes, size_t len, int flags, TokenVec *out) {
    size_t before = out->n;
    if (flags & TOKENIZER_ALLOW_EOT) {
        const char *eot;
        while ((eot = find_eot(bytes, len))) {
            encode_ordinary(e, bytes, (size_t)(eot - bytes), out);
            tokenvec_push(out, e->tok->eot);
            len -= (size_t)(eot - bytes) + EOT_LEN;
            bytes = eot + EOT_LEN;
        }
    }
    encode_ordinary(e, bytes, len, out);
    return out->n - before;
}

int *tokenizer_encode(const Tokenizer *t, const char *bytes, size_t len, int flags, size_t *n) {
    Encoder *e = encoder_new(t);
    TokenVec v = {0};
    encoder_encode(e, bytes, len, flags, &v);
    encoder_free(e);
    *n = v.n;
    return v.ids ? v.ids : xmalloc(sizeof(int));
}
