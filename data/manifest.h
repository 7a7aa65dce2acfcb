// The manifest of a shard set: <dir>/<name>_manifest.txt, written by `hybrid prepare`
// beside the shards of one run and checked by the loader (data/shardcheck.h). The shards
// stay llm.c's files (docs/background.md, "llm.c token shards"); the manifest is one text
// file beside them:
//
//   hybrid-shard-manifest 1
//   name brown
//   vocab_size 50257
//   eot 50256
//   shards 2
//   shard train 1237074 2475172 975fb822 brown_train_000000.bin
//   shard val 65384 131792 41d28016 brown_val_000000.bin
//
// A shard line holds the split, the token count, the file size in bytes, the CRC-32 of
// the whole file (header included) in hex, and the file name (the rest of the line, in
// the manifest's folder).
#ifndef HYBRID_MANIFEST_H
#define HYBRID_MANIFEST_H

#include <stdint.h>

typedef struct {
    char split[16];
    uint64_t tokens, bytes;
    uint32_t crc;
    char *file;  // base name
    int seen;    // set by the loader's check
} ManifestEntry;

typedef struct {
    char *name;
    int vocab_size, eot;
    ManifestEntry *e;
    int n, cap;
} Manifest;

void manifest_init(Manifest *m, const char *name, int vocab_size, int eot);
void manifest_add(Manifest *m, const char *split, const char *file, uint64_t tokens, uint64_t bytes, uint32_t crc);
// Writes m to path atomically (entries sorted by file name).
void manifest_write(const Manifest *m, const char *path);
// Reads path into m: 1 if it was read, 0 if there is no such file; dies naming path:line
// on a malformed manifest.
int manifest_read(Manifest *m, const char *path);
ManifestEntry *manifest_find(const Manifest *m, const char *file);
void manifest_free(Manifest *m);

// <dir>/<name>_manifest.txt (a new string).
char *manifest_path(const char *dir, const char *name);
// Splits <dir>/<name>_<split>_NNNNNN.bin into new strings (dir "." without a slash);
// returns 0 (and sets nothing) for a path of another form.
int shard_name_parse(const char *path, char **dir, char **name, char **split);

#endif
