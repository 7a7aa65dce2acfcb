// DEFLATE decoding after RFC 1951 (canonical Huffman codes decoded bit by bit, as in
// Mark Adler's puff.c). Slow next to zlib (~20-40 MB/s) but small; it only reads corpora.
#include "inflate.h"

#include <string.h>

#include "base/crc32.h"

typedef struct {
    const uint8_t *in;
    size_t n, pos;
    uint32_t bitbuf;
    int bitcnt;
    int overrun;  // set when a read goes past the end
    Buf *out;
} Inflate;

typedef struct {
    short count[16];   // codes of each length
    short symbol[320]; // symbols ordered by code
} Huffman;

static int bits(Inflate *s, int need) {
    uint32_t val = s->bitbuf;
    while (s->bitcnt < need) {
        if (s->pos >= s->n) {
            s->overrun = 1;
            return 0;
        }
        val |= (uint32_t)s->in[s->pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
    s->bitbuf = need < 32 ? val >> need : 0;
    s->bitcnt -= need;
    return (int)(val & ((1u << need) - 1));
}

// Builds the decoding table from code lengths; returns < 0 if over-subscribed, > 0 if
// incomplete, 0 if complete.
static int construct(Huffman *h, const short *length, int n) {
    short offs[16];
    for (int len = 0; len < 16; len++) h->count[len] = 0;
    for (int sym = 0; sym < n; sym++) h->count[length[sym]]++;
    if (h->count[0] == n) return 0;
    int left = 1;
    for (int len = 1; len < 16; len++) {
        left <<= 1;
        left -= h->count[len];
        if (left < 0) return left;
    }
    offs[1] = 0;
    for (int len = 1; len < 15; len++) offs[len + 1] = (short)(offs[len] + h->count[len]);
    for (int sym = 0; sym < n; sym++)
        if (length[sym]) h->symbol[offs[length[sym]]++] = (short)sym;
    return left;
}

static int decode(Inflate *s, const Huffman *h) {
    int code = 0, first = 0, index = 0;
    for (int len = 1; len < 16; len++) {
        code |= bits(s, 1);
        if (s->overrun) return -1;
        int count = h->count[len];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    return -1;
}

static const short LBASE[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27,
                                31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short LEXT[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short DBASE[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
                                257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const short DEXT[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static const char *codes(Inflate *s, const Huffman *lencode, const Huffman *distcode) {
    for (;;) {
        int sym = decode(s, lencode);
        if (sym < 0) return s->overrun ? "truncated deflate stream" : "invalid literal/length code";
        if (sym < 256) {
            buf_putc(s->out, (char)sym);
        } else if (sym == 256) {
            return NULL;
        } else {
            sym -= 257;
            if (sym >= 29) return "invalid length symbol";
            int len = LBASE[sym] + bits(s, LEXT[sym]);
            int dsym = decode(s, distcode);
            if (dsym < 0 || dsym >= 30) return s->overrun ? "truncated deflate stream" : "invalid distance code";
            size_t dist = (size_t)(DBASE[dsym] + bits(s, DEXT[dsym]));
            if (s->overrun) return "truncated deflate stream";
            if (dist > s->out->len) return "distance too far back";
            buf_reserve(s->out, (size_t)len);
            char *d = s->out->data;
            for (int k = 0; k < len; k++, s->out->len++) d[s->out->len] = d[s->out->len - dist];
        }
    }
}

static const char *stored(Inflate *s) {
    s->bitbuf = 0, s->bitcnt = 0;  // to a byte boundary
    if (s->pos + 4 > s->n) return "truncated stored block";
    unsigned len = s->in[s->pos] | (unsigned)s->in[s->pos + 1] << 8;
    unsigned nlen = s->in[s->pos + 2] | (unsigned)s->in[s->pos + 3] << 8;
    s->pos += 4;
    if (len != (~nlen & 0xffffu)) return "stored block length does not match its complement";
    if (s->pos + len > s->n) return "truncated stored block";
    buf_append(s->out, s->in + s->pos, len);
    s->pos += len;
    return NULL;
}

static const char *fixed(Inflate *s) {
    Huffman lencode, distcode;  // (cheap to build: no shared state)
    short lengths[288];
    int sym = 0;
    for (; sym < 144; sym++) lengths[sym] = 8;
    for (; sym < 256; sym++) lengths[sym] = 9;
    for (; sym < 280; sym++) lengths[sym] = 7;
    for (; sym < 288; sym++) lengths[sym] = 8;
    construct(&lencode, lengths, 288);
    for (sym = 0; sym < 30; sym++) lengths[sym] = 5;
    construct(&distcode, lengths, 30);
    return codes(s, &lencode, &distcode);
}

static const char *dynamic(Inflate *s) {
    static const short order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    short lengths[320];
    Huffman lencode, distcode;
    int nlen = bits(s, 5) + 257, ndist = bits(s, 5) + 1, ncode = bits(s, 4) + 4;
    if (s->overrun) return "truncated deflate stream";
    if (nlen > 286 || ndist > 30) return "bad dynamic block counts";
    int index = 0;
    for (; index < ncode; index++) lengths[order[index]] = (short)bits(s, 3);
    for (; index < 19; index++) lengths[order[index]] = 0;
    if (s->overrun) return "truncated deflate stream";
    if (construct(&lencode, lengths, 19) != 0) return "incomplete code-length code";
    index = 0;
    while (index < nlen + ndist) {
        int sym = decode(s, &lencode);
        if (sym < 0) return s->overrun ? "truncated deflate stream" : "invalid code-length code";
        if (sym < 16) {
            lengths[index++] = (short)sym;
            continue;
        }
        short len = 0;
        int rep;
        if (sym == 16) {
            if (index == 0) return "repeat with no first length";
            len = lengths[index - 1];
            rep = 3 + bits(s, 2);
        } else if (sym == 17) {
            rep = 3 + bits(s, 3);
        } else {
            rep = 11 + bits(s, 7);
        }
        if (index + rep > nlen + ndist) return "too many code lengths";
        while (rep--) lengths[index++] = len;
    }
    if (s->overrun) return "truncated deflate stream";
    if (lengths[256] == 0) return "no end-of-block code";
    int err = construct(&lencode, lengths, nlen);
    if (err < 0 || (err > 0 && nlen - lencode.count[0] != 1)) return "bad literal/length code lengths";
    err = construct(&distcode, lengths + nlen, ndist);
    if (err < 0 || (err > 0 && ndist - distcode.count[0] != 1)) return "bad distance code lengths";
    return codes(s, &lencode, &distcode);
}

const char *inflate_raw(const uint8_t *in, size_t n, Buf *out, size_t *used) {
    Inflate s = {in, n, 0, 0, 0, 0, out};
    int last;
    do {
        last = bits(&s, 1);
        int type = bits(&s, 2);
        if (s.overrun) return "truncated deflate stream";
        const char *err = type == 0 ? stored(&s) : type == 1 ? fixed(&s) : type == 2 ? dynamic(&s)
                                                                                    : "invalid block type 3";
        if (err) return err;
    } while (!last);
    if (used) *used = s.pos;  // the rest of the last byte is padding
    return NULL;
}

const char *inflate_zlib(const uint8_t *in, size_t n, Buf *out) {
    if (n < 6) return "too short for a zlib stream";
    if ((in[0] & 0x0f) != 8 || (in[0] >> 4) > 7) return "not a zlib stream (compression method is not deflate)";
    if (((unsigned)in[0] << 8 | in[1]) % 31) return "not a zlib stream (header check failed)";
    if (in[1] & 0x20) return "zlib stream with a preset dictionary";
    size_t start = out->len, used;
    const char *err = inflate_raw(in + 2, n - 2, out, &used);
    if (err) return err;
    if (2 + used + 4 > n) return "zlib stream without its Adler-32 trailer";
    uint32_t a = 1, b = 0;
    for (size_t i = start; i < out->len; i++) {
        a = (a + (uint8_t)out->data[i]) % 65521;
        b = (b + a) % 65521;
    }
    const uint8_t *t = in + 2 + used;
    uint32_t want = (uint32_t)t[0] << 24 | (uint32_t)t[1] << 16 | (uint32_t)t[2] << 8 | t[3];
    if ((b << 16 | a) != want) return "zlib stream: Adler-32 mismatch (corrupt data)";
    return NULL;
}

const char *inflate_gzip(const uint8_t *in, size_t n, Buf *out) {
    size_t pos = 0;
    do {
        if (n - pos < 18 || in[pos] != 0x1f || in[pos + 1] != 0x8b) return "not a gzip file";
        if (in[pos + 2] != 8) return "gzip: compression method is not deflate";
        int flg = in[pos + 3];
        size_t p = pos + 10;
        if (flg & 4) {  // FEXTRA (dictzip keeps its chunk table here)
            if (p + 2 > n) return "truncated gzip header";
            p += 2 + (in[p] | (size_t)in[p + 1] << 8);
        }
        for (int f = 8; f <= 16; f <<= 1)  // FNAME, FCOMMENT: NUL-terminated
            if (flg & f) {
                while (p < n && in[p]) p++;
                p++;
            }
        if (flg & 2) p += 2;  // FHCRC
        if (p >= n) return "truncated gzip header";
        size_t start = out->len, used;
        const char *err = inflate_raw(in + p, n - p, out, &used);
        if (err) return err;
        p += used;
        if (p + 8 > n) return "gzip member without its trailer";
        uint32_t crc = (uint32_t)in[p] | (uint32_t)in[p + 1] << 8 | (uint32_t)in[p + 2] << 16 | (uint32_t)in[p + 3] << 24;
        uint32_t isize = (uint32_t)in[p + 4] | (uint32_t)in[p + 5] << 8 | (uint32_t)in[p + 6] << 16 |
                         (uint32_t)in[p + 7] << 24;
        if (crc32_update(0, out->data + start, out->len - start) != crc) return "gzip: CRC-32 mismatch (corrupt data)";
        if ((uint32_t)(out->len - start) != isize) return "gzip: length mismatch (corrupt data)";
        pos = p + 8;
    } while (pos < n);
    return NULL;
}
