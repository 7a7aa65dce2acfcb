// Just enough JSON for the data files and Hugging Face config.json: whitespace, strings
// (every escape, including \uXXXX and UTF-16 surrogate pairs, decoded to UTF-8), integers,
// numbers, and skipping any value. Each function reads from *p (never past end) and advances *p. On a syntax
// error it returns a static message and leaves *p at the offending byte; on success
// it returns NULL.
#ifndef HYBRID_JSON_H
#define HYBRID_JSON_H

#include "data/buf.h"

void json_skip_ws(const char **p, const char *end);
// *p must be at the opening quote. Appends the decoded bytes to out (out may be NULL
// to only skip the string). Bytes >= 0x80 are copied as they are.
const char *json_string(const char **p, const char *end, Buf *out);
const char *json_int(const char **p, const char *end, long long *v);
// A number by JSON's grammar (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), as a double.
const char *json_number(const char **p, const char *end, double *v);
// Skips one value of any type (nesting at most 512 deep).
const char *json_skip_value(const char **p, const char *end);
// Walks the object at *p (which must be at its '{'): for each member, member(key, ctx) is
// called with *p at the value, which it must consume (json_skip_value when it does not want
// it); key is the decoded name (key_len bytes, which may include a \u0000, then a NUL).
// Returns NULL with *p after the closing '}', or the first error (the callback's or the
// syntax's) with *p at the offending byte.
typedef const char *(*JsonMember)(const char *key, size_t key_len, const char **p, const char *end, void *ctx);
const char *json_object(const char **p, const char *end, JsonMember member, void *ctx);

#endif
