// Deterministic random numbers: xorshift64* for uniform bits, Box-Muller for normals.
// The whole state is one uint64, so checkpoints can save and restore it exactly.
#ifndef HYBRID_RNG_H
#define HYBRID_RNG_H

#include <stdint.h>

typedef struct { uint64_t state; } Rng;

static inline void rng_seed(Rng *r, uint64_t seed) {
    // splitmix64 scramble so that nearby seeds give unrelated streams; state never 0
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->state = z ? z : 0x2545F4914F6CDD1Dull;
}

static inline uint64_t rng_u64(Rng *r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

// uniform in [0, 1) with 53 random bits
static inline double rng_uniform(Rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

// uniform integer in [0, n), n > 0 (tiny modulo bias is irrelevant at our n)
static inline uint64_t rng_below(Rng *r, uint64_t n) { return rng_u64(r) % n; }

double rng_normal(Rng *r);  // N(0, 1), Box-Muller (one value per call)

#endif
