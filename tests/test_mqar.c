// MQAR (docs/mqar.md): the generator's format on hand-checked tiny cases and on many seeds,
// its determinism (seeds, streams, indices, thread counts), the gap distribution's skew, the
// loader over generated sequences (coverage across ranks, resume), the config errors naming
// their key, and the accuracy count on hand-made logits.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "data/mqar.h"
#include "train/config.h"
#include "base/util.h"
#include "testing.h"

#define MAXT 512

// Tiny cases where the structure is forced whatever the seed, written out by hand.
static void test_tiny_by_hand(void) {
    // V = 4, P = 1, T = 4: the only key is 1 ([1, V/2) = {1}), the value is 2 or 3, the one
    // query slot is position 2, position 3 is filler. Expected:
    //   inputs  = { 1, v,  1, f }      targets = { -1, -1, v, -1 }
    const MqarSpec a = {4, 4, 1};
    int in[4], tg[4], seen_value[4] = {0};
    for (uint64_t i = 0; i < 200; i++) {
        mqar_sequence(&a, 5, MQAR_TRAIN, i, in, tg);
        const int v = in[1];
        CHECK(v == 2 || v == 3, "index %llu: value %d is not in [2, 4)", (unsigned long long)i, v);
        CHECK(in[0] == 1 && in[2] == 1, "index %llu: inputs %d %d %d %d, expected 1 v 1 f", (unsigned long long)i,
              in[0], in[1], in[2], in[3]);
        CHECK(in[3] >= 0 && in[3] < 4, "index %llu: filler %d outside [0, 4)", (unsigned long long)i, in[3]);
        CHECK(tg[0] == -1 && tg[1] == -1 && tg[2] == v && tg[3] == -1,
              "index %llu: targets %d %d %d %d, expected -1 -1 %d -1", (unsigned long long)i, tg[0], tg[1], tg[2], tg[3],
              v);
        if (v >= 0 && v < 4) seen_value[v]++;
    }
    CHECK(seen_value[2] > 50 && seen_value[3] > 50, "values 2 and 3 drawn %d and %d times of 200", seen_value[2],
          seen_value[3]);
    // V = 6, P = 2, T = 8: keys {1, 2} in some order, values two of {3, 4, 5}; both query slots
    // (positions 4 and 6) are used, 5 and 7 are filler:
    //   inputs  = { k0, v0, k1, v1, q0, f, q1, f }   {q0, q1} = {1, 2}
    //   targets = { -1, -1, -1, -1, value of q0, -1, value of q1, -1 }
    const MqarSpec b = {6, 8, 2};
    int in2[8], tg2[8];
    for (uint64_t i = 0; i < 200; i++) {
        mqar_sequence(&b, 9, MQAR_VAL, i, in2, tg2);
        CHECK(in2[0] + in2[2] == 3 && in2[0] * in2[2] == 2, "index %llu: keys %d %d are not {1, 2}",
              (unsigned long long)i, in2[0], in2[2]);
        CHECK(in2[1] != in2[3] && in2[1] >= 3 && in2[1] < 6 && in2[3] >= 3 && in2[3] < 6,
              "index %llu: values %d %d are not two of {3, 4, 5}", (unsigned long long)i, in2[1], in2[3]);
        CHECK(in2[4] + in2[6] == 3 && in2[4] * in2[6] == 2, "index %llu: queries %d %d are not {1, 2}",
              (unsigned long long)i, in2[4], in2[6]);
        for (int q = 4; q <= 6; q += 2) {
            const int want = in2[q] == in2[0] ? in2[1] : in2[3];
            CHECK(tg2[q] == want, "index %llu: target at %d is %d, expected %d", (unsigned long long)i, q, tg2[q], want);
        }
        CHECK(tg2[0] == -1 && tg2[1] == -1 && tg2[2] == -1 && tg2[3] == -1 && tg2[5] == -1 && tg2[7] == -1,
              "index %llu: a target outside the queries is not -1", (unsigned long long)i);
    }
}

// The format's rules on a larger spec, over many seeds and indices.
static void check_format(const MqarSpec *s, uint64_t seed, MqarStream stream, uint64_t index) {
    const int V = s->vocab_size, T = s->seq_len, P = s->pairs, half = V / 2;
    int in[MAXT], tg[MAXT], queried[MAXT] = {0};
    mqar_sequence(s, seed, stream, index, in, tg);
    int bad = 0, queries = 0;
    for (int i = 0; i < P; i++) {
        bad += in[2 * i] < 1 || in[2 * i] >= half;       // keys in [1, V/2)
        bad += in[2 * i + 1] < half || in[2 * i + 1] >= V;  // values in [V/2, V)
        for (int j = 0; j < i; j++) bad += in[2 * j] == in[2 * i] || in[2 * j + 1] == in[2 * i + 1];  // distinct
    }
    for (int t = 0; t < T; t++) {
        bad += in[t] < 0 || in[t] >= V;
        if (tg[t] < 0) {
            bad += tg[t] != -1;
            continue;
        }
        queries++;
        bad += t < 2 * P || (t - 2 * P) % 2;  // a query slot after the pairs
        int pair = -1;
        for (int i = 0; i < P; i++)
            if (in[2 * i] == in[t]) pair = i;
        bad += pair < 0 || tg[t] != in[2 * pair + 1];  // the value that followed this key
        if (pair >= 0) queried[pair]++;
    }
    for (int i = 0; i < P; i++) bad += queried[i] != 1;  // every key asked exactly once
    CHECK(!bad && queries == P, "V %d T %d P %d seed %llu stream %d index %llu: %d broken rules, %d queries", V, T, P,
          (unsigned long long)seed, (int)stream, (unsigned long long)index, bad, queries);
}

static void test_format(void) {
    const MqarSpec specs[] = {{64, 64, 8}, {8192, 256, 32}, {20, 40, 9}, {18, 33, 8}};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
        for (uint64_t seed = 0; seed < 3; seed++)
            for (uint64_t i = 0; i < 50; i++) check_format(&specs[k], seed, (MqarStream)(i % 3), i);
}

static int same_sequence(const MqarSpec *s, uint64_t seed_a, MqarStream st_a, uint64_t i_a, uint64_t seed_b,
                         MqarStream st_b, uint64_t i_b) {
    int a_in[MAXT], a_tg[MAXT], b_in[MAXT], b_tg[MAXT];
    mqar_sequence(s, seed_a, st_a, i_a, a_in, a_tg);
    mqar_sequence(s, seed_b, st_b, i_b, b_in, b_tg);
    return !memcmp(a_in, b_in, sizeof(int) * (size_t)s->seq_len) && !memcmp(a_tg, b_tg, sizeof(int) * (size_t)s->seq_len);
}

static void test_determinism(void) {
    const MqarSpec s = {512, 128, 16};
    CHECK(same_sequence(&s, 3, MQAR_TRAIN, 17, 3, MQAR_TRAIN, 17), "the same seed, stream and index differ");
    CHECK(!same_sequence(&s, 3, MQAR_TRAIN, 17, 4, MQAR_TRAIN, 17), "seeds 3 and 4 give the same sequence");
    CHECK(!same_sequence(&s, 3, MQAR_TRAIN, 17, 3, MQAR_VAL, 17), "train and val streams give the same sequence");
    CHECK(!same_sequence(&s, 3, MQAR_VAL, 17, 3, MQAR_EVAL, 17), "val and eval streams give the same sequence");
    CHECK(!same_sequence(&s, 3, MQAR_TRAIN, 17, 3, MQAR_TRAIN, 18), "indices 17 and 18 give the same sequence");
    // any thread count: 64 sequences made serially and by 4 threads in a scrambled order
    enum { N = 64 };
    int *serial = xmalloc(sizeof(int) * 2 * N * 128), *threaded = xmalloc(sizeof(int) * 2 * N * 128);
    for (int i = 0; i < N; i++) mqar_sequence(&s, 11, MQAR_TRAIN, (uint64_t)i, serial + 256 * i, serial + 256 * i + 128);
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
    for (int k = 0; k < N; k++) {
        const int i = (k * 37) % N;
        mqar_sequence(&s, 11, MQAR_TRAIN, (uint64_t)i, threaded + 256 * i, threaded + 256 * i + 128);
    }
    CHECK(!memcmp(serial, threaded, sizeof(int) * 2 * N * 128), "4 threads give other bytes than 1");
    free(serial);
    free(threaded);
    // A pin of this generator's bytes (seed 1, train stream, index 0 of V 16, T 16, P 3), as this
    // code wrote them on 2026-12-02: a change to the generator changes every MQAR run's data
    // and shows here. Its format checked by hand: pairs (2, 12) (6, 11) (5, 10); query slots at
    // 6, 8, 10, 12, 14; queries 5 at 8 -> 10, 6 at 10 -> 11, 2 at 12 -> 12; the rest filler.
    const MqarSpec pin = {16, 16, 3};
    const int want_in[16] = {2, 12, 6, 11, 5, 10, 13, 12, 5, 6, 6, 4, 2, 3, 10, 5};
    const int want_tg[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 10, -1, 11, -1, 12, -1, -1, -1};
    int in[16], tg[16];
    mqar_sequence(&pin, 1, MQAR_TRAIN, 0, in, tg);
    CHECK(!memcmp(in, want_in, sizeof in) && !memcmp(tg, want_tg, sizeof tg), "the pinned sequence changed");
}

// Query slot g is drawn with weight (g + 1)^-0.99: with one pair and 32 slots the first slot
// has probability 1 / sum_g (g+1)^-0.99 ~ 0.245, the last ~ 0.0079.
static void test_gap_skew(void) {
    const MqarSpec s = {64, 66, 1};
    int in[66], tg[66], first = 0, last = 0;
    const int n = 4000;
    for (int i = 0; i < n; i++) {
        mqar_sequence(&s, 2, MQAR_TRAIN, (uint64_t)i, in, tg);
        first += tg[2] >= 0;
        last += tg[64] >= 0;
    }
    double w = 0;
    for (int g = 0; g < 32; g++) w += pow(g + 1.0, MQAR_POWER_A - 1);
    const double p_first = 1 / w, p_last = pow(32.0, MQAR_POWER_A - 1) / w;
    CHECK(fabs(first - n * p_first) < 5 * sqrt(n * p_first), "first slot drawn %d times of %d, expected ~%.0f", first,
          n, n * p_first);
    CHECK(fabs(last - n * p_last) < 5 * sqrt(n * p_last) + 1, "last slot drawn %d times of %d, expected ~%.0f", last, n,
          n * p_last);
}

static void test_check(void) {
    char why[256];
    const MqarSpec ok = {66, 64, 16}, long_pairs = {4096, 63, 16}, small_vocab = {33, 64, 16}, none = {64, 64, 0};
    CHECK(mqar_check(&ok, why, sizeof why) == NULL, "V 66 T 64 P 16 refused: %s", why);
    const char *k = mqar_check(&long_pairs, why, sizeof why);
    CHECK(k && !strcmp(k, "mqar_pairs") && strstr(why, "seq_len >= 4 x mqar_pairs = 64"), "T 63 P 16: %s (%s)",
          k ? k : "accepted", why);
    k = mqar_check(&small_vocab, why, sizeof why);
    CHECK(k && !strcmp(k, "vocab_size") && strstr(why, "vocab_size >= 2 x mqar_pairs + 2 = 34"), "V 33 P 16: %s (%s)",
          k ? k : "accepted", why);
    k = mqar_check(&none, why, sizeof why);
    CHECK(k && !strcmp(k, "mqar_pairs"), "P 0: %s", k ? k : "accepted");
}

// Config errors name the key and where it was set.
typedef struct {
    const char *keys[4], *values[4];
} Overrides;

static void finalize_with(void *ctx) {
    const Overrides *o = ctx;
    Config c;
    config_defaults(&c);
    for (int i = 0; i < 4 && o->keys[i]; i++) config_set_override(&c, o->keys[i], o->values[i]);
    config_finalize(&c);
}

static void test_config_errors(void) {
    Overrides too_many = {{"mqar_pairs", "seq_len", "vocab_size"}, {"20", "64", "8192"}};
    CHECK(expect_death(finalize_with, &too_many, "pairs for seq_len", "command line --mqar_pairs", "mqar_pairs = 20",
                       "seq_len >= 4 x mqar_pairs = 80"),
          "mqar_pairs 20 with seq_len 64");
    Overrides small = {{"mqar_pairs", "seq_len", "vocab_size"}, {"8", "64", "17"}};
    CHECK(expect_death(finalize_with, &small, "small vocab", "command line --vocab_size", "vocab_size = 17",
                       "2 x mqar_pairs + 2 = 18"),
          "vocab_size 17 with mqar_pairs 8");
    Overrides shards = {{"mqar_pairs", "seq_len", "vocab_size", "train_data"}, {"8", "64", "64", "x_*.bin"}};
    CHECK(expect_death(finalize_with, &shards, "shards too", "command line --train_data", "train_data is set",
                       "mqar_pairs = 8"),
          "train_data with mqar_pairs");
    // a good MQAR config finalizes
    Overrides fine = {{"mqar_pairs", "seq_len", "vocab_size"}, {"8", "64", "64"}};
    char *err;
    int status = run_forked(finalize_with, &fine, 60, &err);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a good MQAR config was refused: %s", err);
    free(err);
}

static void open_too_few(void *ctx) {
    (void)ctx;
    const MqarSpec s = {64, 32, 4};
    Loader L;
    loader_open_mqar(&L, &s, 0, MQAR_TRAIN, 7, "mqar_train_sequences", 4, 0, 2, 0, 0);
}

// Every rank's rows are the sequences the loader documents; one epoch covers each usable
// sequence once over the ranks; a seek resumes where the run was.
static void test_loader(void) {
    const MqarSpec s = {64, 32, 4};
    enum { B = 2, W = 2, NSEQ = 11, T = 32 };  // 2 samples of 4 sequences; 3 never read
    int in[B * T], tg[B * T], want_in[T], want_tg[T], seen[NSEQ] = {0};
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        memset(seen, 0, sizeof seen);
        for (int rank = 0; rank < W; rank++) {
            Loader L;
            loader_open_mqar(&L, &s, 5, MQAR_TRAIN, NSEQ, "mqar_train_sequences", B, rank, W, shuffle, 9);
            CHECK(loader_samples_per_epoch(&L) == 2, "samples per epoch %zu, expected 2", loader_samples_per_epoch(&L));
            for (int k = 0; k < 2; k++) {
                loader_next(&L, in, tg);
                for (int b = 0; b < B; b++) {
                    int found = -1;
                    for (int j = 0; j < NSEQ; j++) {
                        mqar_sequence(&s, 5, MQAR_TRAIN, (uint64_t)j, want_in, want_tg);
                        if (!memcmp(want_in, in + b * T, sizeof want_in) && !memcmp(want_tg, tg + b * T, sizeof want_tg))
                            found = j;
                    }
                    CHECK(found >= 0, "rank %d row %d is none of the sequences", rank, b);
                    if (found >= 0) seen[found]++;
                    if (!shuffle && found >= 0)  // sample k, rank r, row b is sequence (k W + r) B + b
                        CHECK(found == (k * W + rank) * B + b, "rank %d sample %d row %d is sequence %d", rank, k, b,
                              found);
                }
            }
            CHECK(L.pos.epoch == 1 && L.pos.sample == 0, "rank %d did not finish one epoch", rank);
            loader_close(&L);
        }
        int once = 0;
        for (int j = 0; j < NSEQ; j++) once += seen[j] == 1;
        CHECK(once == 8, "shuffle %d: %d sequences seen exactly once, expected 8", shuffle, once);
    }
    // resume: a fresh loader seeked to a position gives what the first gave from there
    const int nseq = 40;
    Loader a, b;
    loader_open_mqar(&a, &s, 5, MQAR_TRAIN, nseq, "mqar_train_sequences", B, 1, W, 1, 3);
    int in1[B * T], tg1[B * T];
    for (int k = 0; k < 13; k++) loader_next(&a, in1, tg1);  // into the second epoch
    loader_open_mqar(&b, &s, 5, MQAR_TRAIN, nseq, "mqar_train_sequences", B, 1, W, 1, 3);
    loader_seek(&b, a.pos);
    int same = 1;
    for (int k = 0; k < 6; k++) {
        loader_next(&a, in1, tg1);
        loader_next(&b, in, tg);
        same &= !memcmp(in, in1, sizeof in) && !memcmp(tg, tg1, sizeof tg);
    }
    CHECK(same, "a seeked loader gives other batches");
    loader_close(&a);
    loader_close(&b);
    CHECK(expect_death(open_too_few, NULL, "too few", "mqar_train_sequences = 7",
                       "fewer than one batch of 2 rank(s) x batch_size 4"),
          "7 sequences for 2 ranks x 4 rows");
}

// Accuracy on hand-made logits: 4 rows of a vocabulary of 5 padded to 8 columns.
static void test_score(void) {
    const float logits[4][8] = {
        {0.1f, 0.2f, 3.0f, -1.0f, 0.0f, 0, 0, 0},    // argmax 2 = target 2: right
        {9.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0, 0, 0},     // target -1: not a query
        {0.0f, 2.0f, 1.0f, 0.0f, 1.5f, 0, 99.0f, 0}, // argmax 1 (the padding's 99 does not count), target 4: wrong
        {5.0f, 1.0f, 0.0f, 5.0f, 0.0f, 0, 0, 0},     // 0 and 3 tie: the lower id, 0 = target: right
    };
    const int targets[4] = {2, -1, 4, 0};
    MqarScore sc = {0, 0};
    mqar_score_rows(&logits[0][0], 8, 5, targets, 4, &sc);
    CHECK(sc.queries == 3 && sc.correct == 2, "scored %ld of %ld, expected 2 of 3", sc.correct, sc.queries);
    CHECK(mqar_argmax(logits[2], 5) == 1 && mqar_argmax(logits[2], 8) == 6, "argmax of row 2: %d over 5, %d over 8",
          mqar_argmax(logits[2], 5), mqar_argmax(logits[2], 8));
    MqarScore none = {0, 0};
    const int all_ignored[4] = {-1, -1, -1, -1};
    mqar_score_rows(&logits[0][0], 8, 5, all_ignored, 4, &none);
    CHECK(none.queries == 0 && none.correct == 0, "ignored rows counted: %ld of %ld", none.correct, none.queries);
}

int main(void) {
    test_tiny_by_hand();
    test_format();
    test_determinism();
    test_gap_skew();
    test_check();
    test_config_errors();
    test_loader();
    test_score();
    TEST_MAIN_END();
}
