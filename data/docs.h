// Documents from the inputs of `prepare`, in a fixed order.
//
// Inputs are files or folders. Folders are walked recursively, names sorted byte-wise
// at every level, hidden entries (.name) skipped, so the order depends only on the
// names. Formats:
//   text   every file is one document;
//   jsonl  every line holding a JSON object is one document: its "text" field
//          (blank lines are skipped; a line without "text" is an error naming file:line);
//   brown  every file is one tagged Brown sample, converted by brown_to_text; in
//          folders only sample names (ca01 .. cr09) are read;
//   auto   *.jsonl files are JSONL, all others text.
// Documents with no text (an empty file, "text": "") are skipped.
#ifndef HYBRID_DOCS_H
#define HYBRID_DOCS_H

#include <stdint.h>
#include <stdio.h>

#include "data/buf.h"

typedef enum { FORMAT_AUTO, FORMAT_TEXT, FORMAT_JSONL, FORMAT_BROWN } DocFormat;

typedef struct {
    char *path;
    DocFormat format;  // never FORMAT_AUTO
    uint64_t size;
} InputFile;

typedef struct {
    InputFile *files;
    size_t nfiles;
    uint64_t total_bytes;  // sum of the file sizes
    // cursor
    size_t file;
    FILE *jsonl;           // the open JSONL file, if any
    size_t line;           // JSONL: lines read so far; other formats: 1 once read
    char *linebuf;
    size_t linecap;
    uint64_t pending;      // bytes read but not yet credited to a document
} DocReader;

typedef struct {
    Buf text;
    const char *path;      // where it came from (owned by the reader)
    size_t line;           // JSONL line, 0 for whole files
    uint64_t bytes;        // input bytes read so far, up to the end of this document
} Doc;

// Expands the inputs; dies naming a path that does not exist or holds no files.
void docs_open(DocReader *r, char **paths, int npaths, DocFormat format);
// Reads the next document into d (reusing its buffer). Returns 0 at the end.
// Dies naming file:line on malformed JSONL.
int docs_next(DocReader *r, Doc *d);
void docs_rewind(DocReader *r);
// The number of documents docs_next will return (JSONL files are read and checked,
// other files only need their size). Leaves the reader rewound.
uint64_t docs_count(DocReader *r);
void docs_close(DocReader *r);
const char *docs_format_name(DocFormat f);

#endif
