// safetensors reader: a strict parser for the header grammar, then layout checks.
// The file is mapped read-only; tensors are copied out by the caller.
#include "safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32.h"
#include "base/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as is"
#endif

#define MAX_HEADER (100u << 20)  // as the reference implementation

static const struct { const char *name; int size; } DTYPES[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2},
    {"U8", 1}, {"BOOL", 1},
};

int st_dtype_size(const char *dtype) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (!strcmp(DTYPES[i].name, dtype)) return DTYPES[i].size;
    return 0;
}

void st_shape_str(const int64_t *shape, int ndim, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < size) snprintf(buf + n, size - n, ")");
}

// ---- the header parser: just the JSON this grammar needs ----

typedef struct {
    const char *start, *p, *end;
    const char *path;
} Json;

__attribute__((format(printf, 2, 3), noreturn)) static void bad(const Json *j, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die("%s: bad safetensors header: %s (at header byte %zu)", j->path, msg, (size_t)(j->p - j->start));
}

static void skip_ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int peek(Json *j) {
    skip_ws(j);
    return j->p < j->end ? (unsigned char)*j->p : -1;
}

static void expect(Json *j, char c, const char *what) {
    if (peek(j) != c) {
        if (j->p >= j->end) bad(j, "unexpected end of header, expected '%c' (%s)", c, what);
        bad(j, "expected '%c' (%s), found '%c'", c, what, *j->p);
    }
    j->p++;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static unsigned read_hex4(Json *j) {
    if (j->end - j->p < 4) bad(j, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)j->p[i]);
        if (h < 0) bad(j, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    j->p += 4;
    return v;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// A JSON string, unescaped, NUL-terminated (caller frees). `what` names it in errors.
static char *parse_string(Json *j, const char *what) {
    if (peek(j) != '"') bad(j, "expected a string (%s)", what);
    j->p++;
    // the unescaped text is never longer than the escaped one
    const char *q = j->p;
    while (q < j->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= j->end) bad(j, "unterminated string (%s)", what);
    char *out = xmalloc((size_t)(q - j->p) + 1), *o = out;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c < 0x20) bad(j, "control character in a string (%s)", what);
        if (c != '\\') { *o++ = (char)c; continue; }
        char e = *j->p++;
        switch (e) {
        case '"': case '\\': case '/': *o++ = e; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp = read_hex4(j);
            if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') bad(j, "unpaired surrogate (%s)", what);
                j->p += 2;
                unsigned lo = read_hex4(j);
                if (lo < 0xDC00 || lo >= 0xE000) bad(j, "unpaired surrogate (%s)", what);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                bad(j, "unpaired surrogate (%s)", what);
            }
            if (cp == 0) bad(j, "\\u0000 in a string (%s)", what);
            o += put_utf8(o, cp);
            break;
        }
        default: bad(j, "bad escape '\\%c' (%s)", e, what);
        }
    }
    j->p++;
    *o = 0;
    return out;
}

// A non-negative JSON integer (no sign, fraction or exponent) below 2^62.
static uint64_t parse_uint(Json *j, const char *what) {
    if (peek(j) < '0' || peek(j) > '9') bad(j, "expected a non-negative integer (%s)", what);
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9') bad(j, "leading zero (%s)", what);
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_C(1) << 62) / 10) bad(j, "integer too large (%s)", what);
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) bad(j, "expected an integer (%s)", what);
    return v;
}

// Parses `[a, b, ...]` of at most `max` integers into out; returns the count.
static int parse_uint_array(Json *j, uint64_t *out, int max, const char *what) {
    expect(j, '[', what);
    int n = 0;
    if (peek(j) == ']') { j->p++; return 0; }
    for (;;) {
        if (n == max) bad(j, "more than %d entries (%s)", max, what);
        out[n++] = parse_uint(j, what);
        if (peek(j) == ']') { j->p++; return n; }
        expect(j, ',', what);
    }
}

static void parse_tensor(Json *j, StTensor *t) {
    char what[160];
    snprintf(what, sizeof what, "tensor '%.100s'", t->name);
    int have_dtype = 0, have_shape = 0, have_off = 0;
    expect(j, '{', what);
    if (peek(j) == '}') bad(j, "%s has no fields", what);
    for (;;) {
        char *key = parse_string(j, what);
        expect(j, ':', what);
        if (!strcmp(key, "dtype")) {
            if (have_dtype++) bad(j, "%s: duplicate 'dtype'", what);
            char *d = parse_string(j, what);
            t->elem_size = st_dtype_size(d);
            if (!t->elem_size) bad(j, "%s: unknown dtype '%.20s'", what, d);
            snprintf(t->dtype, sizeof t->dtype, "%s", d);
            free(d);
        } else if (!strcmp(key, "shape")) {
            if (have_shape++) bad(j, "%s: duplicate 'shape'", what);
            uint64_t dims[ST_MAX_DIMS];
            t->ndim = parse_uint_array(j, dims, ST_MAX_DIMS, what);
            for (int d = 0; d < t->ndim; d++) t->shape[d] = (int64_t)dims[d];
        } else if (!strcmp(key, "data_offsets")) {
            if (have_off++) bad(j, "%s: duplicate 'data_offsets'", what);
            uint64_t off[2];
            if (parse_uint_array(j, off, 2, what) != 2) bad(j, "%s: data_offsets needs [begin, end]", what);
            t->begin = (size_t)off[0];
            t->end = (size_t)off[1];
        } else {
            bad(j, "%s: unknown field '%.40s'", what, key);
        }
        free(key);
        if (peek(j) == '}') { j->p++; break; }
        expect(j, ',', what);
    }
    if (!have_dtype || !have_shape || !have_off)
        bad(j, "%s lacks '%s'", what, !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
}

static void parse_metadata(Json *j, StFile *f) {
    expect(j, '{', "for __metadata__");
    if (peek(j) == '}') { j->p++; return; }
    for (;;) {
        char *key = parse_string(j, "__metadata__ key");
        expect(j, ':', "after a __metadata__ key");
        char *val = parse_string(j, "__metadata__ values must be strings");
        f->meta = xrealloc(f->meta, sizeof(char *) * (size_t)(2 * f->n_meta + 2));
        f->meta[2 * f->n_meta] = key;
        f->meta[2 * f->n_meta + 1] = val;
        f->n_meta++;
        if (peek(j) == '}') { j->p++; return; }
        expect(j, ',', "between __metadata__ entries");
    }
}

static void parse_header(Json *j, StFile *f) {
    int have_meta = 0;
    expect(j, '{', "at the start of the header");
    if (peek(j) == '}') {
        j->p++;
    } else {
        for (;;) {
            char *name = parse_string(j, "tensor name");
            expect(j, ':', "after a tensor name");
            if (!strcmp(name, "__metadata__")) {
                if (have_meta++) bad(j, "two __metadata__ entries");
                parse_metadata(j, f);
                free(name);
            } else {
                f->tensors = xrealloc(f->tensors, sizeof(StTensor) * (size_t)(f->count + 1));
                StTensor *t = &f->tensors[f->count++];
                memset(t, 0, sizeof *t);
                t->name = name;
                parse_tensor(j, t);
            }
            if (peek(j) == '}') { j->p++; break; }
            expect(j, ',', "between entries");
        }
    }
    if (peek(j) != -1) bad(j, "unexpected '%c' after the closing '}'", *j->p);
}

// ---- layout checks ----

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void check_layout(StFile *f) {
    const char *path = f->path;
    for (int i = 0; i < f->count; i++) {
        StTensor *t = &f->tensors[i];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] && numel > SIZE_MAX / 8 / (size_t)t->shape[d])
                die("%s: tensor '%s': shape is too large", path, t->name);
            numel *= (size_t)t->shape[d];
        }
        t->numel = numel;
        char shape[160];
        st_shape_str(t->shape, t->ndim, shape, sizeof shape);
        if (t->end < t->begin)
            die("%s: tensor '%s': data_offsets [%zu, %zu] end before they begin", path, t->name, t->begin, t->end);
        if (t->end - t->begin != numel * (size_t)t->elem_size)
            die("%s: tensor '%s': data_offsets [%zu, %zu] hold %zu bytes but dtype %s and shape %s need %zu", path,
                t->name, t->begin, t->end, t->end - t->begin, t->dtype, shape, numel * (size_t)t->elem_size);
    }
    StTensor **order = xmalloc(sizeof(StTensor *) * (size_t)(f->count ? f->count : 1));
    for (int i = 0; i < f->count; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->count, sizeof *order, cmp_name);
    for (int i = 1; i < f->count; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name)) die("%s: bad safetensors header: tensor '%s' appears twice", path, order[i]->name);
    qsort(order, (size_t)f->count, sizeof *order, cmp_offset);
    size_t pos = 0;
    for (int i = 0; i < f->count; i++) {
        const StTensor *t = order[i];
        if (t->begin > f->data_len)
            die("%s: file is truncated: tensor '%s' starts at data byte %zu but only %zu data bytes follow the header",
                path, t->name, t->begin, f->data_len);
        if (t->begin < pos)
            die("%s: tensors '%s' and '%s' overlap in the data section", path, order[i - 1]->name, t->name);
        if (t->begin > pos)
            die("%s: %zu bytes before tensor '%s' belong to no tensor", path, t->begin - pos, t->name);
        pos = t->end;
    }
    if (pos > f->data_len)
        die("%s: file is truncated: the header describes %zu bytes of tensor data but only %zu follow the header "
            "(tensor '%s' is cut)", path, pos, f->data_len, order[f->count - 1]->name);
    if (pos < f->data_len) die("%s: %zu bytes after the last tensor belong to no tensor", path, f->data_len - pos);
    free(order);
}

static void check_crc(const StFile *f) {
    const char *want = st_meta(f, ST_CRC_KEY);
    if (!want) return;
    char *end;
    errno = 0;
    unsigned long w = strtoul(want, &end, 16);
    if (strlen(want) != 8 || *end || errno) die("%s: bad safetensors header: %s = '%s' is not 8 hex digits", f->path, ST_CRC_KEY, want);
    uint32_t got = crc32_update(0, f->data, f->data_len);
    if (got != (uint32_t)w)
        die("%s: checksum mismatch: the data section has CRC-32 %08x but the header says %s (the file is corrupted)",
            f->path, got, want);
}

void st_open(StFile *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = xstrdup(path);
    int fd = open_regular(path);
    if (fd < 0) die("%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("%s: cannot stat (%s)", path, strerror(errno));
    size_t size = (size_t)st.st_size;
    if (size < 8) die("%s: bad safetensors header: the file has %zu bytes, too few for the 8-byte header length", path, size);
    f->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) die("%s: cannot map (%s)", path, strerror(errno));
    f->map_len = size;
    const unsigned char *b = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > size - 8)
        die("%s: bad safetensors header: header length %llu is larger than the file (%zu bytes)", path,
            (unsigned long long)n, size);
    if (n < 2 || n > MAX_HEADER) die("%s: bad safetensors header: implausible header length %llu", path, (unsigned long long)n);
    Json j = {(const char *)b + 8, (const char *)b + 8, (const char *)b + 8 + n, path};
    parse_header(&j, f);
    f->data = b + 8 + n;
    f->data_len = size - 8 - (size_t)n;
    check_layout(f);
    check_crc(f);
}

void st_close(StFile *f) {
    if (f->map && f->map != MAP_FAILED) munmap(f->map, f->map_len);
    for (int i = 0; i < f->count; i++) free(f->tensors[i].name);
    for (int i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->tensors);
    free(f->meta);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}
