#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void json_skip_ws(const char **p, const char *end) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    *p = s;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *s, const char *end, uint32_t *v) {
    if (end - s < 4) return 0;
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(s[i]);
        if (d < 0) return 0;
        x = x * 16 + (uint32_t)d;
    }
    *v = x;
    return 1;
}

static void put_utf8(Buf *out, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    }
    buf_append(out, b, n);
}

// *s points just after "\u"; reads one code point, combining a surrogate pair.
static const char *unicode_escape(const char **s, const char *end, uint32_t *cp) {
    uint32_t hi;
    if (!hex4(*s, end, &hi)) return "\\u must be followed by 4 hex digits";
    *s += 4;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return "lone UTF-16 low surrogate in \\u escape";
    if (hi < 0xD800 || hi > 0xDBFF) {
        *cp = hi;
        return NULL;
    }
    uint32_t lo;
    if (end - *s < 6 || (*s)[0] != '\\' || (*s)[1] != 'u' || !hex4(*s + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
        return "UTF-16 high surrogate \\uD8xx-\\uDBxx not followed by a low surrogate \\uDCxx-\\uDFxx";
    *s += 6;
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    return NULL;
}

const char *json_string(const char **p, const char *end, Buf *out) {
    const char *s = *p;
    if (s >= end || *s != '"') return "expected a string";
    s++;
    for (;;) {
        const char *run = s;  // copy plain bytes in one go
        while (s < end && *s != '"' && *s != '\\' && (unsigned char)*s >= 0x20) s++;
        if (out) buf_append(out, run, (size_t)(s - run));
        if (s >= end) {
            *p = s;
            return "unterminated string";
        }
        if (*s == '"') break;
        if ((unsigned char)*s < 0x20) {
            *p = s;
            return "raw control character in string (must be escaped)";
        }
        const char *esc = s++;  // backslash
        if (s >= end) {
            *p = esc;
            return "unterminated escape";
        }
        char c = *s++, r;
        switch (c) {
        case '"': r = '"'; break;
        case '\\': r = '\\'; break;
        case '/': r = '/'; break;
        case 'b': r = '\b'; break;
        case 'f': r = '\f'; break;
        case 'n': r = '\n'; break;
        case 'r': r = '\r'; break;
        case 't': r = '\t'; break;
        case 'u': {
            uint32_t cp;
            const char *err = unicode_escape(&s, end, &cp);
            if (err) {
                *p = esc;
                return err;
            }
            if (out) put_utf8(out, cp);
            continue;
        }
        default: *p = esc; return "invalid escape";
        }
        if (out) buf_putc(out, r);
    }
    *p = s + 1;
    return NULL;
}

const char *json_int(const char **p, const char *end, long long *v) {
    const char *s = *p;
    int neg = s < end && *s == '-';
    if (neg) s++;
    if (s >= end || *s < '0' || *s > '9') return "expected an integer";
    long long x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (x > (INT64_MAX - 9) / 10) return "integer too large";
        x = x * 10 + (*s++ - '0');
    }
    if (s < end && (*s == '.' || *s == 'e' || *s == 'E')) {
        *p = s;
        return "expected an integer, found a fraction or exponent";
    }
    *v = neg ? -x : x;
    *p = s;
    return NULL;
}

static const char *digits(const char **s, const char *end) {
    if (*s >= end || **s < '0' || **s > '9') return "expected a digit";
    while (*s < end && **s >= '0' && **s <= '9') (*s)++;
    return NULL;
}

const char *json_number(const char **p, const char *end, double *v) {
    const char *s = *p;
    if (s < end && *s == '-') s++;
    if (s < end && *s == '0') s++;
    else if (digits(&s, end)) return "expected a number";
    if (s < end && *s == '.' && (s++, digits(&s, end))) return "expected digits after '.'";
    if (s < end && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < end && (*s == '+' || *s == '-')) s++;
        if (digits(&s, end)) return "expected digits in the exponent";
    }
    char buf[64];
    if ((size_t)(s - *p) >= sizeof buf) return "number too long";
    memcpy(buf, *p, (size_t)(s - *p));
    buf[s - *p] = 0;
    *v = strtod(buf, NULL);
    *p = s;
    return NULL;
}

static const char *skip_literal(const char **p, const char *end, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(end - *p) < n || memcmp(*p, word, n) != 0) return "invalid value";
    *p += n;
    return NULL;
}

static const char *skip_number(const char **p, const char *end) {
    const char *s = *p;
    if (s < end && *s == '-') s++;
    if (s >= end || *s < '0' || *s > '9') return "invalid value";
    while (s < end && ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' || *s == '+' || *s == '-')) s++;
    *p = s;
    return NULL;
}

static const char *skip_value(const char **p, const char *end, int depth) {
    if (depth > 512) return "nesting deeper than 512";
    json_skip_ws(p, end);
    if (*p >= end) return "expected a value";
    char open = **p;
    if (open == '"') return json_string(p, end, NULL);
    if (open == 't') return skip_literal(p, end, "true");
    if (open == 'f') return skip_literal(p, end, "false");
    if (open == 'n') return skip_literal(p, end, "null");
    if (open != '{' && open != '[') return skip_number(p, end);
    char close = open == '{' ? '}' : ']';
    (*p)++;
    json_skip_ws(p, end);
    if (*p < end && **p == close) {
        (*p)++;
        return NULL;
    }
    for (;;) {
        const char *err;
        if (open == '{') {
            json_skip_ws(p, end);
            if ((err = json_string(p, end, NULL))) return err;
            json_skip_ws(p, end);
            if (*p >= end || **p != ':') return "expected ':'";
            (*p)++;
        }
        if ((err = skip_value(p, end, depth + 1))) return err;
        json_skip_ws(p, end);
        if (*p < end && **p == ',') {
            (*p)++;
            continue;
        }
        if (*p < end && **p == close) {
            (*p)++;
            return NULL;
        }
        return open == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
    }
}

const char *json_skip_value(const char **p, const char *end) { return skip_value(p, end, 0); }

const char *json_object(const char **p, const char *end, JsonMember member, void *ctx) {
    if (*p >= end || **p != '{') return "expected '{'";
    (*p)++;
    json_skip_ws(p, end);
    if (*p < end && **p == '}') {
        (*p)++;
        return NULL;
    }
    Buf key = {0};
    const char *err = NULL;
    for (;;) {
        json_skip_ws(p, end);
        key.len = 0;
        if ((err = json_string(p, end, &key))) break;
        buf_putc(&key, 0);
        key.len--;
        json_skip_ws(p, end);
        if (*p >= end || **p != ':') {
            err = "expected ':'";
            break;
        }
        (*p)++;
        json_skip_ws(p, end);
        if ((err = member(key.data, key.len, p, end, ctx))) break;
        json_skip_ws(p, end);
        if (*p < end && **p == ',') {
            (*p)++;
            continue;
        }
        if (*p < end && **p == '}') {
            (*p)++;
            break;
        }
        err = "expected ',' or '}'";
        break;
    }
    buf_free(&key);
    return err;
}
