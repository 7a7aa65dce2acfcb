// Shard sets and their manifest (data/manifest.h, data/shardset.h, data/shardcheck.h): a
// set that does not match its manifest is refused naming the file and the problem
// (missing, extra, truncated, modified, mixed with another run, partly matched); a prepare
// killed while writing leaves the old set, one killed while publishing leaves a set that
// the loader (or the next prepare) finishes; a write error removes the temporary folder.
// Sets are written through the same ShardSeq / shardset calls as `hybrid prepare` (no
// tokenizer needed).
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/shardseq.h"
#include "data/shardset.h"
#include "base/util.h"
#include "testing.h"

#define D "out/test-tmp/shardset"

typedef struct {
    const char *dir;
    unsigned seed;
    int ntrain, nval;      // shards of SHARD tokens (the last of each split shorter)
    const char *kill;      // HYBRID_KILL_AT for the child, or NULL
    long fsize_limit;      // RLIMIT_FSIZE for the child, or 0
} Run;

#define SHARD 700

// As prepare_main does: begin, push tokens through ShardSeq into the temporary folder, commit.
static void prepare_run(void *arg) {
    const Run *r = arg;
    if (r->kill) setenv("HYBRID_KILL_AT", r->kill, 1);
    if (r->fsize_limit) {
        signal(SIGXFSZ, SIG_IGN);  // then write() fails with EFBIG, as it fails with ENOSPC on a full disk
        setrlimit(RLIMIT_FSIZE, &(struct rlimit){(rlim_t)r->fsize_limit, (rlim_t)r->fsize_limit});
    }
    char *tmp = shardset_begin(r->dir, "s", 0);
    Manifest m;
    manifest_init(&m, "s", 50257, 50256);
    for (int v = 0; v < 2; v++) {
        ShardSeq s;
        shardseq_init(&s, tmp, "s", v ? "val" : "train", SHARD, &m);
        int n = (v ? r->nval : r->ntrain) * SHARD - SHARD / 3;
        for (int k = 0; k < n; k++) {
            int id = (int)((r->seed * 7919u + (unsigned)k * 31u + (unsigned)v) % 50257u);
            shardseq_push(&s, &id, 1);
        }
        shardseq_finish(&s);
    }
    shardset_commit(r->dir, "s", &m);
    manifest_free(&m);
    free(tmp);
}

static void make_set(const char *dir, unsigned seed, int ntrain, int nval) {
    char *err;
    Run r = {dir, seed, ntrain, nval, NULL, 0};
    remove_tree(dir);
    int status = run_forked(prepare_run, &r, 60, &err);
    if (status != 0) die("make_set %s: status %d: %s", dir, status, err);
    free(err);
}

static void open_only(void *pattern) {
    Loader L;
    loader_open(&L, pattern, 2, 8, 0, 1, 50257, 1, 1);
    loader_close(&L);
}

// loader_open(pattern) succeeds; its stderr holds `note` (or no note at all if NULL).
static int opens(const char *pattern, const char *note) {
    char *err;
    int status = run_forked(open_only, (void *)pattern, 60, &err);
    int ok = status == 0 && (note ? strstr(err, note) != NULL : strstr(err, "note") == NULL);
    if (!ok) fprintf(stderr, "  open %s: status %d, stderr: %s\n", pattern, status, err);
    free(err);
    return ok;
}

static char *path(const char *dir, const char *file) {
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/%s", dir, file);
    return b;
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *data = read_file(from, &n);
    if (!data) die("%s: cannot read", from);
    write_file_atomic(to, data, n);
    free(data);
}

static uint32_t file_crc(const char *p) {
    ShardScan s;
    shard_scan(p, 65536, &s);
    return s.crc;
}

static void test_refusals(void) {
    const char *dir = D "/bad";
#define EXPECT_REFUSED(what, ...) \
    CHECK(expect_death(open_only, D "/bad/s_train_*.bin", what, __VA_ARGS__), what)

    make_set(dir, 1, 3, 1);
    CHECK(opens(D "/bad/s_train_*.bin", NULL) && opens(D "/bad/s_val_*.bin", NULL), "a good set loads without a note");

    unlink(path(dir, "s_train_000001.bin"));
    EXPECT_REFUSED("missing shard", "s_train_000001.bin: missing, but", "s_manifest.txt lists it");
    make_set(dir, 1, 3, 1);
    unlink(path(dir, "s_train_000001.bin"));
    unlink(path(dir, "s_train_000002.bin"));
    EXPECT_REFUSED("partial set", "s_train_000001.bin: missing", "a partial set of train shards");

    make_set(dir, 1, 3, 1);
    copy_file(path(dir, "s_train_000000.bin"), path(dir, "s_train_000003.bin"));
    EXPECT_REFUSED("extra shard", "s_train_000003.bin: not listed in", "s_manifest.txt");

    make_set(dir, 1, 3, 1);
    CHECK(truncate(path(dir, "s_train_000001.bin"), 1024 + 2 * SHARD - 2) == 0, "truncate");
    EXPECT_REFUSED("truncated shard", "s_train_000001.bin: 2422 bytes, but", "says 2424 (truncated");

    make_set(dir, 1, 3, 1);
    {
        int fd = open(path(dir, "s_train_000002.bin"), O_WRONLY);
        unsigned char b = 0x5a;
        CHECK(pwrite(fd, &b, 1, 1024 + 101) == 1, "pwrite");
        close(fd);
    }
    EXPECT_REFUSED("flipped byte", "s_train_000002.bin: checksum mismatch: CRC-32", "the file was modified");

    // two runs mixed: a shard of run B in run A's set, and A's shards under B's manifest
    make_set(dir, 1, 3, 1);
    make_set(D "/other", 2, 3, 1);
    copy_file(path(D "/other", "s_train_000001.bin"), path(dir, "s_train_000001.bin"));
    EXPECT_REFUSED("shard of another run", "s_train_000001.bin: checksum mismatch", "comes from another prepare run");
    make_set(dir, 1, 3, 1);
    copy_file(path(D "/other", "s_manifest.txt"), path(dir, "s_manifest.txt"));
    EXPECT_REFUSED("manifest of another run", "s_train_000000.bin: checksum mismatch");

    // a pattern that takes part of a split
    make_set(dir, 1, 3, 1);
    CHECK(expect_death(open_only, D "/bad/s_train_00000[01].bin", "subset", "s_train_000002.bin: listed in",
                       "not matched by"), "a pattern that takes part of a split");

    // a damaged manifest
    write_file_atomic(path(dir, "s_manifest.txt"), "hybrid-shard-manifest 1\nshards 2\n", 32);
    EXPECT_REFUSED("short manifest", "s_manifest.txt: the manifest says \"shards 2\" but lists 0");
    write_file_atomic(path(dir, "s_manifest.txt"), "hybrid-shard-manifest 1\nshard train x\n", 37);
    EXPECT_REFUSED("bad manifest line", "s_manifest.txt:2: malformed manifest line");
    remove_tree(D "/other");
#undef EXPECT_REFUSED
}

// Every file of the new set (seed 2: 2 train + 1 val shards) is in place and nothing else.
static int is_new_set(const char *dir) {
    Manifest m;
    int ok = manifest_read(&m, path(dir, "s_manifest.txt")) && m.n == 3;
    for (int i = 0; ok && i < m.n; i++) ok = file_crc(path(dir, m.e[i].file)) == m.e[i].crc;
    if (ok) manifest_free(&m);
    return ok && !file_exists(path(dir, "s_train_000002.bin")) && !dir_exists(path(dir, ".s.prepare-publish")) &&
           !dir_exists(path(dir, ".s.prepare-tmp"));
}

static void test_kills(void) {
    const char *dir = D "/kill";
    make_set(dir, 1, 3, 1);  // the old set: 3 train + 1 val shards
    uint32_t old_crc = file_crc(path(dir, "s_train_000001.bin"));
    char *err;
    // killed while writing (after 1 and after 2 shards): the old set is untouched and loads
    for (int k = 1; k <= 2; k++) {
        char kill[32];
        snprintf(kill, sizeof kill, "prepare-shard:%d", k);
        Run r = {dir, 2, 2, 1, kill, 0};
        int status = run_forked(prepare_run, &r, 60, &err);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed at %s: status %d %s", kill, status, err);
        free(err);
        CHECK(file_crc(path(dir, "s_train_000001.bin")) == old_crc && file_exists(path(dir, "s_train_000002.bin")),
              "killed at %s: the old set is intact", kill);
        CHECK(opens(D "/kill/s_train_*.bin", "unfinished output of an interrupted prepare; ignored"),
              "killed at %s: the old set loads, the leftover is noted", kill);
    }
    // the next prepare removes the leftover and publishes
    Run again = {dir, 2, 2, 1, NULL, 0};
    int status = run_forked(prepare_run, &again, 60, &err);
    CHECK(status == 0 && strstr(err, "removed") && strstr(err, "unfinished output of an interrupted run"),
          "the next prepare cleans up: %s", err);
    free(err);
    CHECK(is_new_set(dir) && opens(D "/kill/s_train_*.bin", NULL), "then the new set is complete");

    // killed after k renames of the publish (5: 3 shards, the stale shard, the manifest):
    // the loader finishes the publish before it reads
    for (int k = 1; k <= 4; k++) {
        make_set(dir, 1, 3, 1);
        char kill[32];
        snprintf(kill, sizeof kill, "prepare-publish:%d", k);
        Run r = {dir, 2, 2, 1, kill, 0};
        status = run_forked(prepare_run, &r, 60, &err);
        CHECK(WIFSIGNALED(status) && dir_exists(path(dir, ".s.prepare-publish")), "killed at %s: status %d %s", kill,
              status, err);
        free(err);
        CHECK(opens(D "/kill/s_val_*.bin", "finished publishing the shard set") && is_new_set(dir),
              "killed at %s: the loader finishes the publish", kill);
    }
    // ... or the next prepare does
    make_set(dir, 1, 3, 1);
    Run r = {dir, 2, 2, 1, "prepare-publish:2", 0};
    run_forked(prepare_run, &r, 60, &err);
    free(err);
    status = run_forked(prepare_run, &again, 60, &err);
    CHECK(status == 0 && strstr(err, "finished publishing") && is_new_set(dir), "prepare finishes a publish: %s", err);
    free(err);
}

static void test_write_error(void) {
    const char *dir = D "/full";
    make_set(dir, 1, 3, 1);
    uint32_t old_crc = file_crc(path(dir, "s_train_000000.bin"));
    char *err;
    Run r = {dir, 2, 2, 1, NULL, 2000};  // a shard is 2424 bytes: the first one fails
    int status = run_forked(prepare_run, &r, 60, &err);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, ".s.prepare-tmp/s_train_000000.bin: write error") &&
              strstr(err, "removed the unfinished output"),
          "a write error names the shard: status %d %s", status, err);
    free(err);
    CHECK(!dir_exists(path(dir, ".s.prepare-tmp")) && file_crc(path(dir, "s_train_000000.bin")) == old_crc &&
              opens(D "/full/s_train_*.bin", NULL),
          "a write error removes the temporary folder and leaves the old set");

    // a prepare that is running holds a lock: a second one is refused, not allowed to delete its work
    mkdir_p(path(dir, ".s.prepare-tmp"));
    int fd = open(path(dir, ".s.prepare-tmp"), O_RDONLY | O_DIRECTORY);
    CHECK(flock(fd, LOCK_EX) == 0, "flock");
    Run second = {dir, 2, 2, 1, NULL, 0};
    CHECK(expect_death(prepare_run, &second, "two at once", "another `hybrid prepare` is writing this shard set"),
          "two prepares of one set at once");
    close(fd);
}

int main(void) {
    mkdir_p(D);
    test_refusals();
    test_kills();
    test_write_error();
    remove_tree(D);
    TEST_MAIN_END();
}
