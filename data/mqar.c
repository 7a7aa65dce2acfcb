// The MQAR sequence generator and its accuracy count (mqar.h; docs/mqar.md).
#include "mqar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"
#include "base/util.h"

const char *mqar_check(const MqarSpec *s, char *why, size_t size) {
    if (s->pairs < 1) {
        snprintf(why, size, "mqar_pairs = %d: an MQAR sequence needs at least one key-value pair", s->pairs);
        return "mqar_pairs";
    }
    if ((long)s->seq_len < 4L * s->pairs) {
        snprintf(why, size,
                 "mqar_pairs = %d needs seq_len >= 4 x mqar_pairs = %ld (2 tokens per pair, then a query slot of 2 "
                 "tokens per pair); seq_len is %d",
                 s->pairs, 4L * s->pairs, s->seq_len);
        return "mqar_pairs";
    }
    if ((long)s->vocab_size < 2L * s->pairs + 2) {
        snprintf(why, size,
                 "vocab_size = %d is too small for mqar_pairs = %d: keys are distinct ids in [1, vocab_size/2) and "
                 "values distinct ids in [vocab_size/2, vocab_size), so it needs vocab_size >= 2 x mqar_pairs + 2 = %ld",
                 s->vocab_size, s->pairs, 2L * s->pairs + 2);
        return "vocab_size";
    }
    return NULL;
}

// One splitmix64 scramble of h ^ v (rng_seed's): chaining it over (seed, stream, index)
// gives every sequence its own generator.
static uint64_t mix(uint64_t h, uint64_t v) {
    Rng r;
    rng_seed(&r, h ^ v);
    return r.state;
}

// Writes k distinct ids from [lo, hi) into out, in random order (a partial Fisher-Yates
// shuffle of the range; pool holds hi - lo ints).
static void draw_distinct(Rng *r, int lo, int hi, int k, int *pool, int *out) {
    const int n = hi - lo;
    for (int i = 0; i < n; i++) pool[i] = lo + i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)rng_below(r, (uint64_t)(n - i));
        int t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        out[i] = pool[i];
    }
}

// Draws k distinct slots from [0, n) with probabilities proportional to weight, one at a
// time without replacement (a drawn slot's weight becomes 0). weight is consumed.
static void draw_weighted(Rng *r, double *weight, int n, int k, int *out) {
    for (int i = 0; i < k; i++) {
        double total = 0;
        for (int g = 0; g < n; g++) total += weight[g];
        double u = rng_uniform(r) * total, acc = 0;
        int pick = -1;
        for (int g = 0; g < n; g++) {
            if (weight[g] == 0) continue;
            pick = g;  // the last slot left, should rounding leave acc below u
            acc += weight[g];
            if (acc > u) break;
        }
        out[i] = pick;
        weight[pick] = 0;
    }
}

void mqar_sequence(const MqarSpec *s, uint64_t seed, MqarStream stream, uint64_t index, int *inputs, int *targets) {
    const int V = s->vocab_size, T = s->seq_len, P = s->pairs, half = V / 2;
    const int start = 2 * P, slots = (T - start) / 2;  // query slot g is position start + 2g
    Rng r;
    r.state = mix(mix(mix(0, seed), (uint64_t)stream), index);  // never 0 (rng_seed)
    int *pool = xmalloc(sizeof(int) * (size_t)(V - half)), *keys = xmalloc(sizeof(int) * (size_t)P),
        *values = xmalloc(sizeof(int) * (size_t)P), *gaps = xmalloc(sizeof(int) * (size_t)P);
    double *weight = xmalloc(sizeof(double) * (size_t)slots);
    draw_distinct(&r, 1, half, P, pool, keys);
    draw_distinct(&r, half, V, P, pool, values);
    for (int g = 0; g < slots; g++) weight[g] = pow(g + 1.0, MQAR_POWER_A - 1.0);
    draw_weighted(&r, weight, slots, P, gaps);
    for (int t = 0; t < T; t++) {
        inputs[t] = -1;
        targets[t] = -1;
    }
    for (int i = 0; i < P; i++) {
        inputs[2 * i] = keys[i];
        inputs[2 * i + 1] = values[i];
        inputs[start + 2 * gaps[i]] = keys[i];  // query i asks for pair i's value
        targets[start + 2 * gaps[i]] = values[i];
    }
    for (int t = start; t < T; t++)  // everything else after the pairs: uniform filler
        if (inputs[t] < 0) inputs[t] = (int)rng_below(&r, (uint64_t)V);
    free(pool);
    free(keys);
    free(values);
    free(gaps);
    free(weight);
}

int mqar_argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

void mqar_score_rows(const float *logits, size_t stride, int V, const int *targets, size_t rows, MqarScore *score) {
    for (size_t r = 0; r < rows; r++) {
        if (targets[r] < 0) continue;
        score->queries++;
        score->correct += mqar_argmax(logits + r * stride, V) == targets[r];
    }
}
