// Shared pieces of the chunked ELU+1 linear attention on CUDA (linear_attn.cu: forward,
// workspace, decode step; linear_attn_bwd.cu: backward). The math: docs/delta-rule.md,
// "Linear attention with the ELU+1 feature map", "Chunked linear attention" and "Chunked
// linear-attention backward"; the reference: model/ops/delta_rule/linear_attn.c.
//
// Structure (as fla's chunked kernels): chunk-parallel kernels for the work inside a chunk,
// one sequential scan per (sequence, head, state element) for the inter-chunk recurrence.
// Every chunk-parallel kernel is one block of LA_THREADS threads per (chunk slot, head[, tile])
// (chunk slots: seq_index.cuh) computing 64 x 64 output tiles (LA_C rows x LA_TILE channels)
// with SIMT fp32 loops over shared-memory tiles; each thread owns a 4 x 4 sub-tile, rows
// ty + 16a and columns tx + 16b (ty = tid / 16, tx = tid % 16). The inner loops (la_mm) are
// what tensor-core MMA would replace.
//
// Layouts: q, k, dq, dk (B,T,H,K), v, o, dout, dv (B,T,H,V) bf16; S (N,H,K,V), z (N,H,K) fp32.
// Workspace (fp32), per (chunk slot, head) = slot * H + h:
//   states  (KV + K) floats: S_n (K x V, row-major) then z_n (K), the state entering the chunk
//           (first its own contribution K^T V and sum k^, replaced by the scan);
//   backward also: dstates (KV + K): the gradient of the state leaving the chunk (first the
//           chunk's own Q^T dn and sum q^ dden); stats (2 C^2 + 2 C): A = (Q^ K^T) masked,
//           P2 = (dn V^T + dden 1^T) masked, den, dden (C each).
#ifndef HYBRID_KERNELS_DELTA_RULE_LINEAR_ATTN_CUH
#define HYBRID_KERNELS_DELTA_RULE_LINEAR_ATTN_CUH

#include "kernels/common.cuh"
#include "kernels/delta_rule/seq_index.cuh"

#define LA_C 64          // chunk size (fla's): the only one these kernels take
#define LA_TILE 64       // key / value channels per tile
#define LA_THREADS 256   // 16 x 16 threads, 4 x 4 outputs each
#define LA_LD (LA_TILE + 1)  // padded shared row: column walks are bank-conflict free
#define LA_TILE_FLOATS (LA_C * LA_LD)
#define LA_MAX_DIM 256   // K, V
#define LA_EPS 1e-10f    // LINEAR_ATTN_EPS of the normaliser

static_assert(LA_C == LA_TILE, "the 4 x 4 thread tiles assume 64-row and 64-channel tiles");

// phi(x) = elu(x) + 1 and phi'(x)
__device__ __forceinline__ float la_phi(float x) { return x > 0.f ? x + 1.f : expf(x); }
__device__ __forceinline__ float la_dphi(float x) { return x > 0.f ? 1.f : expf(x); }

// tile[r][c] = f(r, c) for r < rows and c < cols, else 0 (rows, cols <= 64)
template <class F> __device__ __forceinline__ void la_load(float *tile, int rows, int cols, F f) {
    for (int e = threadIdx.x; e < LA_C * LA_TILE; e += LA_THREADS) {
        const int r = e / LA_TILE, c = e % LA_TILE;
        tile[r * LA_LD + c] = r < rows && c < cols ? f(r, c) : 0.f;
    }
}

// acc[a][b] += sum_{p < n} L(ty + 16a, p) R(p, tx + 16b)
template <class FL, class FR> __device__ __forceinline__ void la_mm(float (&acc)[4][4], int n, FL L, FR R) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    for (int p = 0; p < n; p++) {
        float l[4], r[4];
#pragma unroll
        for (int a = 0; a < 4; a++) l[a] = L(ty + 16 * a, p);
#pragma unroll
        for (int b = 0; b < 4; b++) r[b] = R(p, tx + 16 * b);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) acc[a][b] += l[a] * r[b];
    }
}

__device__ __forceinline__ void la_zero(float (&acc)[4][4]) {
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0.f;
}

// sum over the 16 threads of one ty (16 consecutive lanes of a warp)
__device__ __forceinline__ float la_row_sum(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// element (row r of the chunk at tok0, head h, channel c) of a (B,T,H,D) tensor
__device__ __forceinline__ float la_at(const bf16 *x, size_t tok0, int r, int h, int H, int D, int c) {
    return __bfloat162float(x[((tok0 + (size_t)r) * H + h) * (size_t)D + c]);
}

// The chunk's causal scores and normaliser, shared by the output kernel and the backward
// (docs/delta-rule.md, "Chunked linear attention"): over the key tiles, At = q^ k^T masked to
// c <= r < rows (q^ = scale phi(q), k^ = phi(k)) and, with normalize,
// den_r = q^_r . z_n + sum_{c<=r} A[r][c] + eps (else 1). Qt, Kt, At are [LA_C][LA_LD] tiles, zt
// [LA_TILE], den [LA_C]. Per key tile, load(k0, kw) runs with the tile loads (before the
// barrier) and use(kw) after them (the output kernel adds q^ S_n there). Ends after a barrier:
// At and den are complete.
template <class Load, class Use>
__device__ __forceinline__ void la_scores(float *Qt, float *Kt, float *At, float *zt, float *den, const bf16 *q,
                                          const bf16 *k, const float *zn, float scale, int normalize, size_t tok0,
                                          int rows, int h, int H, int K, Load load, Use use) {
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    float accA[4][4], qz = 0.f;
    la_zero(accA);
    for (int k0 = 0; k0 < K; k0 += LA_TILE) {
        const int kw = min(LA_TILE, K - k0);
        la_load(Qt, rows, kw, [&](int r, int c) { return scale * la_phi(la_at(q, tok0, r, h, H, K, k0 + c)); });
        la_load(Kt, rows, kw, [&](int r, int c) { return la_phi(la_at(k, tok0, r, h, H, K, k0 + c)); });
        load(k0, kw);
        if (tid < LA_TILE) zt[tid] = normalize && tid < kw ? zn[k0 + tid] : 0.f;
        __syncthreads();
        la_mm(accA, kw, [&](int r, int p) { return Qt[r * LA_LD + p]; }, [&](int p, int c) { return Kt[c * LA_LD + p]; });
        use(kw);
        if (tid < LA_C)
            for (int p = 0; p < kw; p++) qz += Qt[tid * LA_LD + p] * zt[p];
        __syncthreads();
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int r = ty + 16 * a, c = tx + 16 * b;
            At[r * LA_LD + c] = c <= r && r < rows ? accA[a][b] : 0.f;
        }
    __syncthreads();
    if (tid < LA_C) {
        float d = 1.f;
        if (normalize) {
            d = qz;
            for (int c = 0; c <= tid; c++) d += At[tid * LA_LD + c];
            d += LA_EPS;
        }
        den[tid] = d;
    }
    __syncthreads();
}

__host__ __device__ static inline int la_tiles(int n) { return (n + LA_TILE - 1) / LA_TILE; }
__host__ __device__ static inline size_t la_state_stride(int K, int V) { return (size_t)K * V + K; }
__host__ __device__ static inline size_t la_stats_stride(void) { return 2 * (size_t)LA_C * LA_C + 2 * (size_t)LA_C; }

// checks shared by the entries; returns N, the number of sequences
int la_check(const char *op, int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
             const void *workspace);

// The chunk states (linear_attn.cu). bwd 0: states[slot] = the state entering each chunk
// (S0, z0 or zeros first), ST / zT (may be NULL) the final ones. bwd 1: dstates[slot] = the
// gradient of the state leaving each chunk (dST, dzT or zeros last), dS0 / dz0 (may be NULL)
// the gradient of the initial state; needs the backward stats (den, dden).
void la_chunk_states(int bwd, float *states, float *fin, float *zfin, const float *init, const float *zinit,
                     const bf16 *a, const bf16 *r, const float *stats, float scale, int normalize, int B, int T,
                     int H, int K, int V, const int *offsets, int N);

#endif
