// Carving buffers out of one allocation. A layout function runs twice: once with
// base NULL to count the bytes, once with the real base to hand out pointers.
#ifndef HYBRID_CARVE_H
#define HYBRID_CARVE_H

#include <stddef.h>

#include "base/real.h"

typedef struct {
    char *base;
    size_t used;
    size_t elem;  // bytes per element of the backend
    size_t stat;  // bytes per statistics element of the backend (Backend.stat_size)
} Carver;

static inline void *carve_bytes(Carver *cv, size_t bytes) {
    size_t at = cv->used;
    cv->used += (bytes + 255) / 256 * 256;  // 256-byte alignment for every buffer
    return cv->base ? cv->base + at : NULL;
}

static inline real *carve(Carver *cv, size_t n) { return (real *)carve_bytes(cv, n * cv->elem); }
// n statistics elements (norm mean/rstd, attention lse, per-row losses)
static inline real *carve_stat(Carver *cv, size_t n) { return (real *)carve_bytes(cv, n * cv->stat); }

#endif
