// Shards and the token-sharded loader: coverage across ranks, shuffling, resume,
// validation split coverage, and every bad-shard error.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "data/shard.h"
#include "base/util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/loader"

// Shard s holds tokens whose value encodes their global position: 3 shards of
// different lengths, values unique across the whole set.
static const size_t LENS[3] = {1001, 700, 1300};

static void make_shards(void) {
    mkdir_p(DIR_);
    size_t base = 0;
    for (int s = 0; s < 3; s++) {
        uint16_t *tok = xmalloc(sizeof(uint16_t) * LENS[s]);
        for (size_t i = 0; i < LENS[s]; i++) tok[i] = (uint16_t)(base + i);
        char path[128];
        snprintf(path, sizeof path, DIR_ "/good_%06d.bin", s);
        shard_write(path, tok, LENS[s]);
        free(tok);
        base += LENS[s];
    }
}

// Each rank reads one epoch; every input token of every sample must be seen by
// exactly one rank, and targets must be the inputs shifted by one.
static void check_coverage(int world, int shuffle) {
    const int B = 2, T = 8;
    size_t total = LENS[0] + LENS[1] + LENS[2];
    int *seen = xcalloc(total, sizeof(int));
    size_t expected = 0;
    int inputs[16], targets[16];
    for (int rank = 0; rank < world; rank++) {
        Loader L;
        loader_open(&L, DIR_ "/good_*.bin", B, T, rank, world, 65536, shuffle, 7);
        size_t n = loader_samples_per_epoch(&L);
        if (rank == 0) {
            for (int s = 0; s < 3; s++) expected += (LENS[s] - 1) / (size_t)(world * B * T) * (size_t)(world * B * T);
        }
        for (size_t k = 0; k < n; k++) {
            loader_next(&L, inputs, targets);
            for (int i = 0; i < B * T; i++) {
                seen[inputs[i]]++;
                if (targets[i] != inputs[i] + 1) {
                    CHECK(0, "target %d does not follow input %d", targets[i], inputs[i]);
                    break;
                }
            }
        }
        CHECK(L.pos.epoch == 1 && L.pos.shard == 0 && L.pos.sample == 0, "rank %d did not finish exactly one epoch", rank);
        loader_close(&L);
    }
    size_t once = 0, more = 0;
    for (size_t i = 0; i < total; i++) {
        once += seen[i] == 1;
        more += seen[i] > 1;
    }
    CHECK(more == 0, "world %d shuffle %d: %zu tokens seen more than once", world, shuffle, more);
    CHECK(once == expected, "world %d shuffle %d: %zu tokens seen once, expected %zu", world, shuffle, once, expected);
    free(seen);
}

static void check_resume(void) {
    const int B = 2, T = 8;
    int in1[16], tg1[16], in2[16], tg2[16];
    Loader a, b;
    loader_open(&a, DIR_ "/good_*.bin", B, T, 1, 2, 65536, 1, 99);
    size_t n = loader_samples_per_epoch(&a);
    // stop part way through the second epoch, resume a fresh loader there, compare
    for (size_t k = 0; k < n + 5; k++) loader_next(&a, in1, tg1);
    LoaderPosition pos = a.pos;
    loader_open(&b, DIR_ "/good_*.bin", B, T, 1, 2, 65536, 1, 99);
    loader_seek(&b, pos);
    int same = 1;
    for (size_t k = 0; k < n; k++) {
        loader_next(&a, in1, tg1);
        loader_next(&b, in2, tg2);
        same &= !memcmp(in1, in2, sizeof in1) && !memcmp(tg1, tg2, sizeof tg1);
    }
    CHECK(same, "resumed loader diverged");
    // epochs are shuffled differently
    Loader c;
    loader_open(&c, DIR_ "/good_*.bin", B, T, 0, 1, 65536, 1, 99);
    size_t m = loader_samples_per_epoch(&c);
    int *first = xmalloc(sizeof(int) * m), differ = 0;
    for (size_t k = 0; k < m; k++) {
        loader_next(&c, in1, tg1);
        first[k] = in1[0];
    }
    for (size_t k = 0; k < m; k++) {
        loader_next(&c, in1, tg1);
        differ |= first[k] != in1[0];
    }
    CHECK(differ, "epoch 2 has the same order as epoch 1");
    // without shuffle the loader reads in file order from the start
    Loader d;
    loader_open(&d, DIR_ "/good_*.bin", B, T, 0, 1, 65536, 0, 0);
    loader_next(&d, in1, tg1);
    CHECK(in1[0] == 0 && in1[15] == 15 && tg1[15] == 16, "unshuffled loader does not start at token 0");
    loader_close(&a);
    loader_close(&b);
    loader_close(&c);
    loader_close(&d);
    free(first);
}

// ---- bad shards ----
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, size_t actual_tokens,
                      uint16_t fill) {
    size_t bytes = SHARD_HEADER_BYTES + 2 * actual_tokens;
    char *buf = xcalloc(1, bytes);
    int32_t *h = (int32_t *)buf;
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    uint16_t *t = (uint16_t *)(buf + SHARD_HEADER_BYTES);
    for (size_t i = 0; i < actual_tokens; i++) t[i] = fill;
    write_file_atomic(path, buf, bytes);
    free(buf);
}

static void open_only(void *ctx) {
    Loader L;
    loader_open(&L, (const char *)ctx, 2, 8, 0, 1, 50257, 1, 1);
    loader_close(&L);
}

static void open_pattern(void *ctx) {
    Loader L;
    loader_open(&L, (const char *)ctx, 2, 8, 0, 1, 50257, 1, 1);
    int in[16], tg[16];
    loader_next(&L, in, tg);
}

int main(void) {
    make_shards();
    check_coverage(1, 0);
    check_coverage(1, 1);
    check_coverage(2, 1);
    check_coverage(3, 1);
    check_coverage(3, 0);
    check_resume();

    // a written shard reads back exactly
    uint16_t back[5];
    shard_read(DIR_ "/good_000001.bin", 0, 5, back);
    CHECK(back[0] == 1001 && back[4] == 1005, "shard_read returned %u..%u", back[0], back[4]);
    CHECK(shard_validate(DIR_ "/good_000002.bin") == 1300, "token count");

    write_raw(DIR_ "/magic.bin", 12345, 1, 100, 100, 1);
    write_raw(DIR_ "/version.bin", SHARD_MAGIC, 7, 100, 100, 1);
    write_raw(DIR_ "/size.bin", SHARD_MAGIC, 1, 100, 90, 1);
    write_raw(DIR_ "/vocab.bin", SHARD_MAGIC, 1, 100, 100, 60000);
    write_raw(DIR_ "/small.bin", SHARD_MAGIC, 1, 10, 10, 1);
    {
        FILE *f = xfopen(DIR_ "/header.bin", "wb");
        fwrite("short", 1, 5, f);
        fclose(f);
    }
    CHECK(expect_death(open_pattern, DIR_ "/nothing_*.bin", "death", "nothing_*.bin: no shard files match"), "no match");
    CHECK(expect_death(open_pattern, DIR_ "/magic.bin", "death", "magic.bin: not a token shard (magic 12345"), "magic");
    CHECK(expect_death(open_pattern, DIR_ "/version.bin", "death", "version.bin: unsupported shard version 7"), "version");
    CHECK(expect_death(open_pattern, DIR_ "/size.bin", "death", "size.bin: header says 100 tokens"), "size");
    // a bad token id is found when the shard is opened, not when a batch reads it
    write_raw(DIR_ "/late_vocab.bin", SHARD_MAGIC, 1, 100, 100, 1);
    {
        FILE *f = xfopen(DIR_ "/late_vocab.bin", "r+b");
        uint16_t bad = 50300;
        fseek(f, SHARD_HEADER_BYTES + 2 * 97, SEEK_SET);
        xfwrite(&bad, 2, 1, f, "late_vocab.bin");
        xfclose(f, "late_vocab.bin");
    }
    CHECK(expect_death(open_pattern, DIR_ "/vocab.bin", "death", "vocab.bin: token id 60000 at token 0 (byte offset 1024) "
                       "is >= vocab_size 50257"), "token id");
    CHECK(expect_death(open_only, DIR_ "/late_vocab.bin", "death", "late_vocab.bin: token id 50300 at token 97 (byte "
                       "offset 1218)"), "token id at the end of a shard, found at open");
    // shards without a manifest (llm.c's) load, with one note
    char *err;
    int status = run_forked(open_only, DIR_ "/good_*.bin", 600, &err);
    CHECK(status == 0 && strstr(err, "good_*.bin: 3 of 3 shards without a manifest") && !strstr(err, "error"),
          "llm.c shards without a manifest: status %d, stderr %s", status, err);
    free(err);
    CHECK(expect_death(open_pattern, DIR_ "/small.bin", "death", "small.bin: 10 tokens is too small"), "small");
    CHECK(expect_death(open_pattern, DIR_ "/header.bin", "death", "header.bin: truncated shard header"), "header");
    TEST_MAIN_END();
}
