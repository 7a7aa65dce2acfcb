// `hybrid prepare`: text files, folders of them, JSONL or the Brown corpus ->
// llm.c-compatible token shards (docs/background.md, "llm.c token shards"). `hybrid prepare
// --help` explains.
#ifndef HYBRID_PREPARE_H
#define HYBRID_PREPARE_H

// argv[0] is "prepare". Returns 0 on success; dies with a message on any error.
int prepare_main(int argc, char **argv);

#endif
