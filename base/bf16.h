// bf16 on the host: the top 16 bits of an fp32. One definition for every C and C++ file that
// converts (the CUDA backend's uploads and downloads, the MPI collectives standing in for NCCL on
// the CUDA emulator, the emulator's __nv_bfloat16, the GPU tests' rounding).
#ifndef HYBRID_BF16_H
#define HYBRID_BF16_H

#include <stdint.h>
#include <string.h>

// fp32 -> bf16, round to nearest even (what __float2bfloat16_rn does); a NaN stays a (quiet) NaN
static inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
