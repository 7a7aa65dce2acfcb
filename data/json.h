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

#endif
