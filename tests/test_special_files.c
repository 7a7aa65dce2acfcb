// A FIFO, a character device or a folder where a file is read (a shard, a config, a
// prepare input, a checkpoint file, the vocabulary, anything through read_file or xfopen)
// is refused at once with a message naming it; none of them may block or read forever.
// Every check runs in a child with a time limit, so a regression fails instead of hanging.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/safetensors.h"
#include "checkpoints/trainer_state.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "train/config.h"
#include "base/util.h"
#include "testing.h"

#define D "out/test-tmp/special"
#define LIMIT 5  // seconds; each refusal takes milliseconds

static void do_read_file(void *p) { free(read_file(p, NULL)); }
static void do_xfopen(void *p) { fclose(xfopen(p, "rb")); }
static void do_config(void *p) {
    Config c;
    config_defaults(&c);
    config_load_file(&c, p);
}
static void do_shard(void *p) {
    Loader L;
    loader_open(&L, p, 2, 8, 0, 1, 50257, 0, 0);
}
static void do_safetensors(void *p) {
    StFile f;
    st_open(&f, p);
}
static void do_trainer_state(void *p) {
    TrainerState ts;
    trainer_state_read(p, &ts);
}
static void do_prepare(void *p) {
    char *argv[] = {"prepare", "--quiet", "--out", D "/out", "--vocab", TOKENIZER_DEFAULT_DIR, p, NULL};
    prepare_main(7, argv);
}
static void do_vocab(void *p) { tokenizer_load_dir(p); }

typedef struct {
    const char *what;
    void (*fn)(void *);
} Reader;

int main(void) {
    mkdir_p(D "/folder");
    mkdir_p(D "/vocab");
    unlink(D "/fifo");
    CHECK(mkfifo(D "/fifo", 0644) == 0, "mkfifo");
    unlink(D "/vocab/encoder.json");
    CHECK(mkfifo(D "/vocab/encoder.json", 0644) == 0, "mkfifo");
    const struct {
        const char *path, *kind;
    } files[] = {
        {D "/fifo", "is a FIFO (named pipe), not a regular file"},
        {"/dev/zero", "is a character device, not a regular file"},
        {"/dev/null", "is a character device, not a regular file"},
        {D "/folder", "is a folder, not a regular file"},
    };
    const Reader readers[] = {
        {"read_file", do_read_file}, {"xfopen", do_xfopen},          {"config", do_config},
        {"shard", do_shard},         {"safetensors", do_safetensors}, {"trainer state", do_trainer_state},
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
        for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++) {
            double t0 = now_seconds();
            CHECK(expect_death_within(LIMIT, readers[r].fn, (void *)files[f].path, readers[r].what, files[f].path,
                                      files[f].kind),
                  "%s of %s", readers[r].what, files[f].path);
            CHECK(now_seconds() - t0 < 2, "%s of %s took %.1f s", readers[r].what, files[f].path, now_seconds() - t0);
        }
    // prepare: a FIFO or a device given as input, or met inside an input folder (a folder is a
    // valid input: its files are read)
    mkdir_p(D "/in");
    write_file_atomic(D "/in/a.txt", "text", 4);
    unlink(D "/in/b.txt");
    CHECK(mkfifo(D "/in/b.txt", 0644) == 0, "mkfifo");
    const char *inputs[] = {D "/fifo", "/dev/zero", "/dev/null", D "/in"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        CHECK(expect_death_within(LIMIT, do_prepare, (void *)inputs[i], "prepare input", "neither a regular file nor a "
                                  "folder (a FIFO, device or socket)"), "prepare of %s", inputs[i]);
    // the vocabulary
    CHECK(expect_death_within(LIMIT, do_vocab, D "/vocab", "vocab", "encoder.json: is a FIFO"), "a FIFO encoder.json");
    remove_tree(D);
    TEST_MAIN_END();
}
