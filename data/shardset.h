// Publishing the shard set of one `hybrid prepare` run, all or nothing (data/README.md).
//
// The set <dir>/<name>_{train,val}_NNNNNN.bin + <dir>/<name>_manifest.txt is written into
// <dir>/.<name>.prepare-tmp/ (each file fsynced), which prepare holds an flock on. The
// commit is one rename of that folder to <dir>/.<name>.prepare-publish/; then its files
// are renamed into <dir>, the shards of the old set that the new manifest does not list
// are removed, the manifest moves last and the folder goes. Every step of the publish is
// idempotent, so whoever finds a .prepare-publish folder (the next prepare, or the loader
// before it reads <dir>) finishes it: a kill at any point leaves the old set or the new
// one. A .prepare-tmp folder without its lock is left by a killed prepare (removed by the
// next prepare of that name, ignored by the loader).
#ifndef HYBRID_SHARDSET_H
#define HYBRID_SHARDSET_H

#include "data/manifest.h"

// Finishes a committed publish of <name>, removes a dead prepare's temporary folder and
// creates a fresh one; returns its path. Until shardset_commit, an error (die) removes
// the temporary folder. Dies if another prepare is writing the same set.
char *shardset_begin(const char *dir, const char *name, int quiet);
// Writes the manifest into the temporary folder, commits and publishes.
void shardset_commit(const char *dir, const char *name, const Manifest *m);
// Finishes the publish of <dir>/.<name>.prepare-publish if there is one; returns 1 if so.
int shardset_finish_publish(const char *dir, const char *name);
// 1 if <dir>/.<name>.prepare-tmp is held by a running prepare.
int shardset_tmp_in_use(const char *tmp);

#endif
