// hybrid: one CLI for training, sampling, data preparation, inspection, import, export and the
// MQAR evaluation.
#include <stdio.h>
#include <string.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "dist/dist.h"
#include "train.h"

static void usage(FILE *f) {
    fprintf(f, "usage: hybrid <command> [options]   (hybrid <command> --help for each)\n\n"
               "commands:\n"
               "  train     train a model from a config on token shards\n"
               "  sample    generate text from a checkpoint\n"
               "  prepare   tokenize text / JSONL into llm.c-format shards\n"
               "  corpus    gather, clean, de-duplicate and split text sources into JSONL for prepare\n"
               "  inspect   print the parameter table, parameter count and FLOPs per token\n"
               "  import    make a checkpoint from a Hugging Face GPT2LMHeadModel folder (--hf)\n"
               "  export    write a Hugging Face GPT2LMHeadModel (--hf) or fla KDAForCausalLM (--fla) folder\n"
               "  eval-mqar accuracy of a checkpoint on multi-query associative recall (docs/mqar.md)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "train")) {  // the one command that runs under mpirun
        dist_init(&argc, &argv);
        int rc = train_main(argc - 1, argv + 1);
        dist_finalize();
        return rc;
    }
    if (!strcmp(cmd, "sample")) return sample_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "prepare")) return prepare_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "corpus")) return corpus_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return inspect_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "import")) return import_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return export_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval-mqar")) return eval_mqar_main(argc - 1, argv + 1);
    fprintf(stderr, "hybrid: error: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
