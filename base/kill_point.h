// Test hook for the crash suite: with HYBRID_KILL_AT=<site>:<n> in the environment, the n-th
// time the program passes kill_point("<site>") it kills itself with SIGKILL, as a crash,
// an OOM kill or `kill -9` at that moment would. Without the variable a kill point costs one
// getenv the first time and a compare after.
//
// Sites (grep kill_point for the list in the code):
//   prepare-shard     after each shard prepare writes into its temporary folder
//   prepare-publish   after each rename of prepare's publish
//   train-step        after each optimizer step, before its checkpoint
//   checkpoint-write  a checkpoint's files are written into .step_N.tmp, not yet published
//   checkpoint-prune  an old checkpoint was renamed to .step_N.del, not yet deleted
//   atomic-replace    a file replaced atomically is written and synced, not yet renamed
//   sample            the end-of-run (or sample_every) sample is about to run
#ifndef HYBRID_KILL_POINT_H
#define HYBRID_KILL_POINT_H

void kill_point(const char *site);

#endif
