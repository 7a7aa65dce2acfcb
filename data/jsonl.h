// One JSONL record: a JSON object on one line whose "text" field holds a document.
#ifndef HYBRID_JSONL_H
#define HYBRID_JSONL_H

#include <stddef.h>

#include "data/buf.h"

// Parses one line (without its newline) as a JSON object and appends the decoded value
// of its top-level "text" field to out (other fields are checked and skipped; if "text"
// appears twice the last one wins). Returns NULL on success, else a message such as
// "no \"text\" field"; *col gets the 1-based byte column of the problem.
const char *jsonl_text(const char *line, size_t len, Buf *out, size_t *col);

#endif
