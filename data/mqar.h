// Multi-query associative recall (MQAR), the synthetic recall task of the Zoology study
// (docs/mqar.md): a sequence starts with key-value pairs, and later repeats every key once;
// at each repeat (a query) the target is the value that followed that key. Every other
// target is -1, which the loss ignores (model_forward, model/model.h).
//
// Sequence `index` of stream `stream` under `seed` is a pure function of those three and
// the spec (docs/mqar.md, "The sequence format"): no state, no threads, so any process or
// thread count produces the same bytes.
#ifndef HYBRID_MQAR_H
#define HYBRID_MQAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int vocab_size;  // V: keys from [1, V/2), values from [V/2, V), filler from [0, V)
    int seq_len;     // T: tokens per sequence
    int pairs;       // P: key-value pairs at the start, each key queried once afterwards
} MqarSpec;

// The streams one seed gives: disjoint sets of sequences for training, validation during
// training, and `hybrid eval-mqar`.
typedef enum { MQAR_TRAIN = 0, MQAR_VAL = 1, MQAR_EVAL = 2 } MqarStream;

// The gap distribution's exponent (docs/mqar.md, "The sequence format"): query slot g (0-based)
// is drawn with weight (g + 1)^(MQAR_POWER_A - 1), Zoology's default, so most queries come
// soon after the pairs and a long tail far from them.
#define MQAR_POWER_A 0.01

// Checks that sequences can be made: pairs >= 1, seq_len >= 4 * pairs (the pairs, then at
// least one query slot of two tokens per pair) and vocab_size >= 2 * pairs + 2 (P distinct
// keys in [1, V/2), P distinct values in [V/2, V)). Returns NULL when they can; otherwise the
// config key at fault ("mqar_pairs" or "vocab_size"), with the reason in why.
const char *mqar_check(const MqarSpec *s, char *why, size_t size);

// Writes sequence `index` of `stream`: inputs[T] token ids, targets[T] (-1 except at the P
// query positions, where it is the queried key's value). The spec must pass mqar_check.
void mqar_sequence(const MqarSpec *s, uint64_t seed, MqarStream stream, uint64_t index, int *inputs, int *targets);

// Accuracy on the queried positions: a position counts when its target is >= 0, and is
// correct when the argmax of its logits over the first V entries (the lowest id among equal
// maxima) equals the target.
typedef struct {
    long queries;
    long correct;
} MqarScore;

int mqar_argmax(const float *logits, int V);
// Adds `rows` rows (row r at logits + r * stride, targets[r]) to score.
void mqar_score_rows(const float *logits, size_t stride, int V, const int *targets, size_t rows, MqarScore *score);

#endif
