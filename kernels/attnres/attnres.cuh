// Shared pieces of the CUDA Block AttnRes kernels (attnres_fwd.cu, attnres_bwd.cu); the
// equations are docs/hybrid.md, "AttnRes op forward" and "AttnRes op backward", mirrored
// from model/ops/attnres/attnres.c.
// Layout: every source V_i, out, dout and dV_i is (N, C) bf16, row-major by token; w and
// gamma (C) bf16; probs, logits, rstd and work (N, n) fp32, row-major by token.
// One warp per token row. The channels of a row are split into groups of W (8: one 16-byte
// load8/store8; 1: scalar, for C % 8 != 0 or unaligned tensors); lane l owns groups
// l, l + 32, ..., l + 32 (NV - 1), kept in registers (groups past C / W are masked off), so
// a source is read once per pass and every lane's channels stay its own.
#ifndef HYBRID_KERNELS_ATTNRES_CUH
#define HYBRID_KERNELS_ATTNRES_CUH

#include "kernels/common.cuh"

// Sources per op a launch takes (the pointer tables go by value as kernel parameters: two
// tables of 128 pointers are 2 KiB, under the 4 KiB parameter limit). The model's ops have
// n_blocks + 1 sources (docs/hybrid.md, "Block AttnRes layer algorithm"): 9 in the KL configs.
#define AR_MAX_SRC 128
#define AR_MAX_C 2048  // channels a row's registers hold (W = 8, NV = 8; or W = 1, NV = 64)

typedef struct {
    const bf16 *p[AR_MAX_SRC];
} ArSrcs;
typedef struct {
    bf16 *p[AR_MAX_SRC];  // NULL: that source gets no gradient
} ArDsrcs;

// lane's W-group j of a row: channels [(j * 32 + lane) * W, + W); valid if below C
template <int W>
__device__ __forceinline__ void ar_load(const bf16 *row, int j, int lane, int C, float v[W]) {
    const int c = (j * 32 + lane) * W;
    if (c >= C) {
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = 0.f;
    } else if (W == 8) {
        load8(row + c, v);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = __bfloat162float(row[c + k]);
    }
}

template <int W>
__device__ __forceinline__ void ar_store(bf16 *row, int j, int lane, int C, const float v[W]) {
    const int c = (j * 32 + lane) * W;
    if (c >= C) return;
    if (W == 8) {
        store8(row + c, v);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) row[c + k] = __float2bfloat16(v[k]);
    }
}

// This lane's slice of the pseudo-query q = w * gamma (the forward and the backward both start
// from it), and a zeroed accumulator of the same shape.
template <int W, int NV>
__device__ __forceinline__ void ar_query(float (&q)[NV][W], float (&acc)[NV][W], const bf16 *w, const bf16 *gamma,
                                         int lane, int C) {
#pragma unroll
    for (int j = 0; j < NV; j++) {
        float g[W];
        ar_load<W>(w, j, lane, C, q[j]);
        ar_load<W>(gamma, j, lane, C, g);
#pragma unroll
        for (int k = 0; k < W; k++) {
            q[j][k] *= g[k];
            acc[j][k] = 0.f;
        }
    }
}

// The lane that owns source i's per-token statistics (writes them and reads them back):
// per-row values every lane holds (warp_sum gives each lane the same bits) are written once.
__device__ __forceinline__ int ar_owner(int i) { return i & 31; }

// Calls FN<W, NV>(args...) for C and the tensors' alignment (`vec`: every bf16 pointer
// 16-byte aligned); dies above AR_MAX_C.
static inline void ar_pick(int C, int vec, const char *who, int *W, int *NV) {
    if (C < 1 || C > AR_MAX_C) die("%s: C = %d outside [1, %d] (a row lives in registers)", who, C, AR_MAX_C);
    if (vec && C % 8 == 0) {
        const int nv = (C / 8 + 31) / 32;  // groups of 8 per lane
        *W = 8;
        *NV = nv <= 4 ? nv : nv <= 6 ? 6 : 8;
    } else {
        const int nv = (C + 31) / 32;  // single channels per lane
        *W = 1;
        *NV = nv <= 4 ? 4 : nv <= 8 ? 8 : nv <= 16 ? 16 : nv <= 32 ? 32 : 64;
    }
}
#define AR_DISPATCH(C, vec, who, FN, ...)                       \
    do {                                                        \
        int W_, NV_;                                            \
        ar_pick(C, vec, who, &W_, &NV_);                        \
        switch (W_ * 100 + NV_) {                               \
        case 801: FN<8, 1>(__VA_ARGS__); break;                 \
        case 802: FN<8, 2>(__VA_ARGS__); break;                 \
        case 803: FN<8, 3>(__VA_ARGS__); break;                 \
        case 804: FN<8, 4>(__VA_ARGS__); break;                 \
        case 806: FN<8, 6>(__VA_ARGS__); break;                 \
        case 808: FN<8, 8>(__VA_ARGS__); break;                 \
        case 104: FN<1, 4>(__VA_ARGS__); break;                 \
        case 108: FN<1, 8>(__VA_ARGS__); break;                 \
        case 116: FN<1, 16>(__VA_ARGS__); break;                \
        case 132: FN<1, 32>(__VA_ARGS__); break;                \
        default: FN<1, 64>(__VA_ARGS__); break;                 \
        }                                                       \
    } while (0)

#endif
