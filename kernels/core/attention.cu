// Causal multi-head softmax attention on packed qkv (B, T, 3C) = [q | k | v]
// (model/ops/attention.c gives the equations and the lse contract):
//   out (B, T, C) = softmax(q k^T / sqrt(hs)) v per head, lse (B, NH, T) fp32 saved.
//
// Head size 64 (GPT-2): flash-attention kernels on bf16 tensor cores (mma.sync
// m16n8k16, fp32 accumulation), tiles of 64 queries x 64 keys, 4 warps of 16 rows,
// K/V (or Q/dO) tiles double-buffered in shared memory through cp.async.
//   forward   one block per (query tile, b, h): online softmax over the key tiles.
//   backward  D = rowsum(dO * O) first; then dK/dV with one block per key tile (looping
//             over query tiles), which also stores dS^T of every tile pair (bf16, 855 MB
//             at GPT-2 124M B=64 T=1024); then dQ = dS K with one block per query tile
//             (looping over the key tiles in order). Every gradient element has one
//             writer: deterministic without atomics. (HYBRID_ATTN_BWD=split: the dQ
//             kernel recomputes S and dP instead of reading dS, two extra matmuls.)
// Other head sizes (the hybrids' 128 among them), and unaligned buffers: the strided flash
// attention of kernels/mla/attention.cu (tensor cores at 64, 128 and 192, SIMT kernels
// otherwise) on the three slices of qkv, whose layout contract (AttnLayout, lse (B, NH, T)
// fp32, natural log) is this op's with q, k, v at columns 0, C, 2C of rows 3C wide.
//
// HYBRID_ATTN=cudnn: cuDNN's flash attention first (kernels/core/attention_cudnn.cu), this
// file's kernels for the shapes it refuses.
//
// Fragment layouts: kernels/mma.cuh. The C fragments of two adjacent 8-column tiles are the
// A fragment of one 16-wide k-step, so P and dS never leave registers.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"

#define ATT_TILE 64
#define ATT_THREADS 128
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// ---- PTX helpers (mma16816, ldsm_x4, cp_async16, pack_bf16: kernels/mma.cuh) ----
// 2^x with the multi-function unit (ex2.approx, ~2 ulp; 2^-inf = 0)
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef HYBRID_CUDA_EMU
    return exp2f(x);  // (the emulator: the correctly rounded 2^x, subnormals kept)
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

template <int HS>
struct Tile {
    bf16 x[ATT_TILE][HS + 8];  // +8: rows 16 bytes apart in banks, so ldmatrix is conflict-free
};

// rows [0, 64) of a tile starting at g (row stride rs elements); rows >= valid zero-filled
template <int HS>
__device__ __forceinline__ void load_tile(Tile<HS> &s, const bf16 *g, size_t rs, int valid) {
    constexpr int VPR = HS / 8;  // 16-byte vectors per row
    for (int i = threadIdx.x; i < ATT_TILE * VPR; i += ATT_THREADS) {
        int r = i / VPR, c = (i % VPR) * 8;
        bool ok = r < valid;
        cp_async16(&s.x[r][c], ok ? g + (size_t)r * rs + c : g, ok);
    }
}

// A fragments of rows [16w, 16w+16) of a tile, all HS columns
template <int HS>
__device__ __forceinline__ void load_a_frags(uint32_t f[HS / 16][4], const Tile<HS> &s, int warp, int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) ldsm_x4(f[kk], &s.x[warp * 16 + (lane & 15)][kk * 16 + 8 * (lane >> 4)]);
}

// acc (16 x 64) += A (16 x HS, fragments) @ Tile^T: B[k = dim][n = tile row]
template <int HS>
__device__ __forceinline__ void mma_a_tileT(float acc[8][4], const uint32_t a[HS / 16][4], const Tile<HS> &s,
                                            int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, &s.x[np * 16 + (lane & 7) + 8 * (lane >> 4)][kk * 16 + 8 * ((lane >> 3) & 1)]);
            mma16816(acc[2 * np], a[kk], b[0], b[1]);
            mma16816(acc[2 * np + 1], a[kk], b[2], b[3]);
        }
}

// acc (16 x HS) += P (16 x 64, as C fragments p[8][4]) @ Tile: B[k = tile row][n = dim]
template <int HS>
__device__ __forceinline__ void mma_p_tile(float acc[HS / 8][4], const float p[8][4], const Tile<HS> &s, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HS / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, &s.x[kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)][dp * 16 + 8 * (lane >> 4)]);
            mma16816(acc[2 * dp], a, b[0], b[1]);
            mma16816(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

template <int N>
__device__ __forceinline__ void zero_acc(float acc[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// rows (g, g+8) of the warp's 16 of a (16 x HS) accumulator, times mul, to row-major global
template <int HS>
__device__ __forceinline__ void store_rows(bf16 *dst, size_t rs, int row0, int T, const float acc[HS / 8][4],
                                           float mul0, float mul1, int lane) {
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < HS / 8; nt++) {
        int d = nt * 8 + 2 * t;
        if (row0 + g < T)
            *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)(row0 + g) * rs + d) =
                __floats2bfloat162_rn(acc[nt][0] * mul0, acc[nt][1] * mul0);
        if (row0 + g + 8 < T)
            *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)(row0 + g + 8) * rs + d) =
                __floats2bfloat162_rn(acc[nt][2] * mul1, acc[nt][3] * mul1);
    }
}

// ---------------------------------------------------------------------------
// forward

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, 4) attn_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int C,
                                                               int NH, float sl2) {
    __shared__ Tile<HS> sQ, sK[2], sV[2];
    const int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    const int qt = ntiles - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t rs = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const int q0 = qt * ATT_TILE;

    load_tile(sQ, base + (size_t)q0 * rs, rs, T - q0);
    load_tile(sK[0], base + C, rs, T);
    load_tile(sV[0], base + 2 * C, rs, T);
    cp_async_commit();

    float o[HS / 8][4], m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
    zero_acc<HS / 8>(o);
    uint32_t qf[HS / 16][4];
    const int qrow0 = q0 + warp * 16 + g;  // this thread's rows: qrow0, qrow0 + 8

    for (int j = 0; j <= qt; j++) {
        if (j < qt) {
            const int k1 = (j + 1) * ATT_TILE;
            load_tile(sK[(j + 1) & 1], base + C + (size_t)k1 * rs, rs, T - k1);
            load_tile(sV[(j + 1) & 1], base + 2 * C + (size_t)k1 * rs, rs, T - k1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) load_a_frags<HS>(qf, sQ, warp, lane);

        float s[8][4];
        zero_acc<8>(s);
        mma_a_tileT<HS>(s, qf, sK[j & 1], lane);

        // scale (log2 domain), causal mask on the diagonal tile, online softmax
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[nt][e] * sl2;
                if (j == qt) {
                    int key = j * ATT_TILE + nt * 8 + 2 * t + (e & 1), q = qrow0 + (e >> 1) * 8;
                    if (key > q) v = -INFINITY;
                }
                s[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mnew = fmaxf(m_r[r], mx[r]);
            corr[r] = fast_exp2(m_r[r] - mnew);
            m_r[r] = mnew;
            l_r[r] *= corr[r];
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = fast_exp2(s[nt][e] - m_r[e >> 1]);
                s[nt][e] = p;
                l_r[e >> 1] += p;
            }
#pragma unroll
        for (int nt = 0; nt < HS / 8; nt++) {
            o[nt][0] *= corr[0];
            o[nt][1] *= corr[0];
            o[nt][2] *= corr[1];
            o[nt][3] *= corr[1];
        }
        mma_p_tile<HS>(o, s, sV[j & 1], lane);
        __syncthreads();  // this buffer is refilled two iterations on
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
    }
    store_rows<HS>(out + (size_t)b * T * C + (size_t)h * HS, C, q0 + warp * 16, T, o, 1.f / l_r[0], 1.f / l_r[1],
                   lane);
    if (t == 0) {
        float *L = lse + ((size_t)b * NH + h) * T;
        if (qrow0 < T) L[qrow0] = (m_r[0] + log2f(l_r[0])) * LN2;
        if (qrow0 + 8 < T) L[qrow0 + 8] = (m_r[1] + log2f(l_r[1])) * LN2;
    }
}

// ---------------------------------------------------------------------------
// backward

// D[b, h, t] = sum_d dO[b, t, h, d] * O[b, t, h, d]   (any head size)
__global__ void attn_bwd_d_kernel(float *D, const bf16 *dout, const bf16 *out, int B, int T, int C, int NH) {
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * NH) return;
    int h = (int)(idx % NH);
    size_t bt = idx / NH;
    int hs = C / NH, b = (int)(bt / T), t = (int)(bt % T);
    const bf16 *x = dout + bt * C + (size_t)h * hs, *y = out + bt * C + (size_t)h * hs;
    float s = 0.f;
    if (hs % 8 == 0 && (((uintptr_t)x | (uintptr_t)y) & 15) == 0) {  // 16-byte loads
        for (int d = 0; d < hs; d += 8) {
            float xv[8], yv[8];
            load8(x + d, xv);
            load8(y + d, yv);
#pragma unroll
            for (int k = 0; k < 8; k++) s += xv[k] * yv[k];
        }
    } else {
        for (int d = 0; d < hs; d++) s += __bfloat162float(x[d]) * __bfloat162float(y[d]);
    }
    D[((size_t)b * NH + h) * T + t] = s;
}

// dK, dV of one key tile: S^T = K Q^T, P^T, dV += P^T dO, dP^T = V dO^T,
// dS^T = P^T (dP^T - D), dK += dS^T Q, over the query tiles i >= key tile.
// K and V stay in shared memory and are re-read as fragments every step, which keeps
// the kernel near 160 registers (3 blocks per multiprocessor instead of 2).
//
// STORE_DS: also write dS^T of every (query tile i, key tile kt) pair, bf16, to the
// global buffer ds (attn_ds_tile gives the layout); attn_bwd_dq_ds_kernel then forms
// dQ = dS K from it (one matmul per tile pair instead of recomputing S and dP: three).
// The tile goes through this warp's 16 rows of a staging tile, so the global stores are
// 16-byte vectors of whole rows.
#define DKDV_SMEM(HS, STORE_DS) ((6 + (STORE_DS)) * sizeof(Tile<HS>) + 4 * ATT_TILE * sizeof(float))

// dS^T tile (query tile i, key tile kt <= i) of head bh: 64 x 64 bf16, [key][query], the
// lower-triangular tile pairs of a head packed row by row (i (i+1) / 2 + kt).
__device__ __forceinline__ size_t attn_ds_tile(int bh, int ntiles, int i, int kt) {
    const size_t ntri = (size_t)ntiles * (ntiles + 1) / 2;
    return ((size_t)bh * ntri + (size_t)i * (i + 1) / 2 + kt) * (ATT_TILE * ATT_TILE);
}

template <int HS, int MINB, bool STORE_DS>
__global__ void __launch_bounds__(ATT_THREADS, MINB) attn_bwd_dkdv_kernel(bf16 *dqkv, bf16 *ds, const bf16 *dout,
                                                                    const bf16 *qkv, const float *lse,
                                                                    const float *Dg, int T, int C, int NH, float sl2,
                                                                    float scale) {
    DYNAMIC_SMEM(unsigned char, smem_raw);
    Tile<HS> *tiles = reinterpret_cast<Tile<HS> *>(smem_raw);
    Tile<HS> &sK = tiles[0], &sV = tiles[1];
    Tile<HS> *sQ = tiles + 2, *sdO = tiles + 4;
    float(*sL)[ATT_TILE] =
        reinterpret_cast<float(*)[ATT_TILE]>(smem_raw + (6 + (STORE_DS ? 1 : 0)) * sizeof(Tile<HS>));
    float(*sD)[ATT_TILE] = sL + 2;
    const int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    const int kt = blockIdx.x;  // key tile 0 has the most query tiles: launched first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t rs = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16 *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *Lrow = lse + ((size_t)b * NH + h) * T, *Drow = Dg + ((size_t)b * NH + h) * T;
    const int k0 = kt * ATT_TILE;

    auto prefetch = [&](int i, int buf) {
        const int q0 = i * ATT_TILE;
        load_tile(sQ[buf], base + (size_t)q0 * rs, rs, T - q0);
        load_tile(sdO[buf], dbase + (size_t)q0 * C, C, T - q0);
        for (int r = threadIdx.x; r < ATT_TILE; r += ATT_THREADS) {
            int q = q0 + r;
            sL[buf][r] = q < T ? Lrow[q] * LOG2E : INFINITY;  // P = 0 past the end
            sD[buf][r] = q < T ? Drow[q] : 0.f;
        }
        cp_async_commit();
    };

    load_tile(sK, base + C + (size_t)k0 * rs, rs, T - k0);
    load_tile(sV, base + 2 * C + (size_t)k0 * rs, rs, T - k0);
    prefetch(kt, 0);  // one group with K and V

    float dk[HS / 8][4], dv[HS / 8][4];
    zero_acc<HS / 8>(dk);
    zero_acc<HS / 8>(dv);
    const int krow0 = k0 + warp * 16 + g;  // this thread's keys: krow0, krow0 + 8
    for (int i = kt; i < ntiles; i++) {
        const int buf = (i - kt) & 1;
        if (i + 1 < ntiles) {
            prefetch(i + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int q0 = i * ATT_TILE;
        uint32_t af[HS / 16][4];

        float st[8][4];  // S^T then P^T: rows = keys, columns = queries
        zero_acc<8>(st);
        load_a_frags<HS>(af, sK, warp, lane);
        mma_a_tileT<HS>(st, af, sQ[buf], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = nt * 8 + 2 * t + (e & 1);
                float p = fast_exp2(st[nt][e] * sl2 - sL[buf][ql]);
                if (i == kt && krow0 + (e >> 1) * 8 > q0 + ql) p = 0.f;
                st[nt][e] = p;
            }
        mma_p_tile<HS>(dv, st, sdO[buf], lane);

        float dpt[8][4];  // dP^T then dS^T
        zero_acc<8>(dpt);
        load_a_frags<HS>(af, sV, warp, lane);
        mma_a_tileT<HS>(dpt, af, sdO[buf], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = nt * 8 + 2 * t + (e & 1);
                dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sD[buf][ql]);
            }
        mma_p_tile<HS>(dk, dpt, sQ[buf], lane);
        if (STORE_DS) {
            // keys past T: 0 (their K rows are zero-filled, but p there is not bounded)
            Tile<HS> &stg = tiles[6];
            const bool kz0 = krow0 >= T, kz1 = krow0 + 8 >= T;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                *reinterpret_cast<uint32_t *>(&stg.x[warp * 16 + g][nt * 8 + 2 * t]) =
                    kz0 ? 0u : pack_bf16(dpt[nt][0], dpt[nt][1]);
                *reinterpret_cast<uint32_t *>(&stg.x[warp * 16 + g + 8][nt * 8 + 2 * t]) =
                    kz1 ? 0u : pack_bf16(dpt[nt][2], dpt[nt][3]);
            }
            __syncwarp();
            bf16 *tile = ds + attn_ds_tile(blockIdx.y, ntiles, i, kt);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int v = lane + 32 * r, row = warp * 16 + v / 8, col = (v % 8) * 8;
                *reinterpret_cast<uint4 *>(tile + row * ATT_TILE + col) =
                    *reinterpret_cast<const uint4 *>(&stg.x[row][col]);
            }
        }
        __syncthreads();
    }
    bf16 *dst = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    store_rows<HS>(dst + C, rs, k0 + warp * 16, T, dk, scale, scale, lane);
    store_rows<HS>(dst + 2 * C, rs, k0 + warp * 16, T, dv, 1.f, 1.f, lane);
}

// dQ of one query tile from the stored dS^T tiles: dQ = sum over key tiles kt <= i, in
// order, of dS_i,kt K_kt (A fragments of dS by a transposing ldmatrix of the [key][query]
// tile). One writer per element, fixed order: deterministic.
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS) attn_bwd_dq_ds_kernel(bf16 *dqkv, const bf16 *ds, const bf16 *qkv, int T,
                                                                     int C, int NH, float scale) {
    __shared__ Tile<HS> sK[2];
    __shared__ Tile<ATT_TILE> sS[2];
    const int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    const int qt = ntiles - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t rs = 3 * (size_t)C;
    const bf16 *kbase = qkv + (size_t)b * T * rs + (size_t)h * HS + C;

    load_tile(sK[0], kbase, rs, T);
    load_tile(sS[0], ds + attn_ds_tile(blockIdx.y, ntiles, qt, 0), ATT_TILE, ATT_TILE);
    cp_async_commit();
    float dq[HS / 8][4];
    zero_acc<HS / 8>(dq);
    for (int j = 0; j <= qt; j++) {
        if (j < qt) {
            const int k1 = (j + 1) * ATT_TILE, nb = (j + 1) & 1;
            load_tile(sK[nb], kbase + (size_t)k1 * rs, rs, T - k1);
            load_tile(sS[nb], ds + attn_ds_tile(blockIdx.y, ntiles, qt, j + 1), ATT_TILE, ATT_TILE);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const Tile<ATT_TILE> &S = sS[j & 1];
        const Tile<HS> &K = sK[j & 1];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t a[4];
            ldsm_x4_t(a, &S.x[kk * 16 + (lane & 7) + 8 * (lane >> 4)][warp * 16 + 8 * ((lane >> 3) & 1)]);
#pragma unroll
            for (int dp = 0; dp < HS / 16; dp++) {
                uint32_t bb[4];
                ldsm_x4_t(bb, &K.x[kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)][dp * 16 + 8 * (lane >> 4)]);
                mma16816(dq[2 * dp], a, bb[0], bb[1]);
                mma16816(dq[2 * dp + 1], a, bb[2], bb[3]);
            }
        }
        __syncthreads();  // this buffer is refilled next iteration
    }
    store_rows<HS>(dqkv + (size_t)b * T * rs + (size_t)h * HS, rs, qt * ATT_TILE + warp * 16, T, dq, scale, scale,
                   lane);
}

// dQ of one query tile: S = Q K^T, P, dP = dO V^T, dS = P (dP - D), dQ += dS K,
// over the key tiles j <= query tile.
template <int HS, int MINB>
__global__ void __launch_bounds__(ATT_THREADS, MINB) attn_bwd_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                  const float *lse, const float *Dg, int T, int C,
                                                                  int NH, float sl2, float scale) {
    __shared__ Tile<HS> sK[2], sV[2];
    const int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    const int qt = ntiles - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t rs = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16 *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *Lrow = lse + ((size_t)b * NH + h) * T, *Drow = Dg + ((size_t)b * NH + h) * T;
    const int q0 = qt * ATT_TILE;

    load_tile(sK[0], base + (size_t)q0 * rs, rs, T - q0);
    load_tile(sV[0], dbase + (size_t)q0 * C, C, T - q0);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[HS / 16][4], of[HS / 16][4];
    load_a_frags<HS>(qf, sK[0], warp, lane);
    load_a_frags<HS>(of, sV[0], warp, lane);
    __syncthreads();

    const int qrow0 = q0 + warp * 16 + g;
    float L2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = qrow0 + 8 * r;
        L2[r] = q < T ? Lrow[q] * LOG2E : INFINITY;
        Dr[r] = q < T ? Drow[q] : 0.f;
    }

    load_tile(sK[0], base + C, rs, T);
    load_tile(sV[0], base + 2 * C, rs, T);
    cp_async_commit();
    float dq[HS / 8][4];
    zero_acc<HS / 8>(dq);
    for (int j = 0; j <= qt; j++) {
        if (j < qt) {
            const int k1 = (j + 1) * ATT_TILE;
            load_tile(sK[(j + 1) & 1], base + C + (size_t)k1 * rs, rs, T - k1);
            load_tile(sV[(j + 1) & 1], base + 2 * C + (size_t)k1 * rs, rs, T - k1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float s[8][4];  // S then P
        zero_acc<8>(s);
        mma_a_tileT<HS>(s, qf, sK[j & 1], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = fast_exp2(s[nt][e] * sl2 - L2[e >> 1]);
                if (j == qt) {
                    int key = j * ATT_TILE + nt * 8 + 2 * t + (e & 1), q = qrow0 + (e >> 1) * 8;
                    if (key > q) p = 0.f;
                }
                s[nt][e] = p;
            }
        float dp[8][4];  // dP then dS
        zero_acc<8>(dp);
        mma_a_tileT<HS>(dp, of, sV[j & 1], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[nt][e] = s[nt][e] * (dp[nt][e] - Dr[e >> 1]);
        mma_p_tile<HS>(dq, dp, sK[j & 1], lane);
        __syncthreads();
    }
    store_rows<HS>(dqkv + (size_t)b * T * rs + (size_t)h * HS, rs, q0 + warp * 16, T, dq, scale, scale, lane);
}


// ---------------------------------------------------------------------------
// Fused backward (the default): one block per key tile computes dK, dV as above and
// also its share of dQ, dQ_i += dS_i,kt K_kt for every query tile i >= kt. The shares
// of one query tile are added in a FIXED order -- key tiles i, i-1, ..., 0 -- into an
// fp32 buffer, ordered by a per-tile counter (the next contributor waits until the
// counter equals its rank; ld.acquire / st.release). The first contributor (the
// diagonal tile) stores, the last (key tile 0) writes scale * sum as bf16 into dqkv.
// In that order a contributor's predecessors are one step ahead in their own loops,
// so blocks that run at the same pace never wait; waits only point to blocks with a
// higher key tile of the same head, which are launched later, so the blocks of fully
// launched heads always finish and free their slots (no deadlock with in-order
// dispatch, the assumption flash-attention 3's deterministic mode also makes).
// Five matmuls per tile pair instead of seven, bit-reproducible.

#ifdef HYBRID_CUDA_EMU
// (compiled, never run: blocks that wait on each other cannot run one after another, so the
// emulator refuses HYBRID_ATTN_BWD=fused, see attn_bwd_mode)
__device__ __forceinline__ int ld_acquire(const int *p) { return *(const volatile int *)p; }
__device__ __forceinline__ void st_release(int *p, int v) { *(volatile int *)p = v; }
#else
__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
#endif

#define FUSED_SMEM(HS) (7 * sizeof(Tile<HS>) + 4 * ATT_TILE * sizeof(float))

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS) attn_bwd_fused_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                     const float *lse, const float *Dg, float *dqacc,
                                                                     int *sem, int T, int C, int NH, float sl2,
                                                                     float scale) {
    DYNAMIC_SMEM(unsigned char, smem_raw);
    Tile<HS> *tiles = reinterpret_cast<Tile<HS> *>(smem_raw);
    Tile<HS> &sK = tiles[0], &sV = tiles[1], &sdS = tiles[6];
    Tile<HS> *sQ = tiles + 2, *sdO = tiles + 4;
    float(*sL)[ATT_TILE] = reinterpret_cast<float(*)[ATT_TILE]>(smem_raw + 7 * sizeof(Tile<HS>));
    float(*sD)[ATT_TILE] = sL + 2;
    const int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    const int kt = blockIdx.x, bh = blockIdx.y;  // key tile 0 (the most work) launches first
    const int b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t rs = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16 *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *Lrow = lse + (size_t)bh * T, *Drow = Dg + (size_t)bh * T;
    float *acc = dqacc + (size_t)bh * T * HS;
    bf16 *dqdst = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    const int k0 = kt * ATT_TILE;

    auto prefetch = [&](int i, int buf) {
        const int q0 = i * ATT_TILE;
        load_tile(sQ[buf], base + (size_t)q0 * rs, rs, T - q0);
        load_tile(sdO[buf], dbase + (size_t)q0 * C, C, T - q0);
        for (int r = threadIdx.x; r < ATT_TILE; r += ATT_THREADS) {
            int q = q0 + r;
            sL[buf][r] = q < T ? Lrow[q] * LOG2E : INFINITY;  // P = 0 past the end
            sD[buf][r] = q < T ? Drow[q] : 0.f;
        }
        cp_async_commit();
    };

    load_tile(sK, base + C + (size_t)k0 * rs, rs, T - k0);
    load_tile(sV, base + 2 * C + (size_t)k0 * rs, rs, T - k0);
    prefetch(kt, 0);  // one group with K and V

    float dk[HS / 8][4], dv[HS / 8][4];
    zero_acc<HS / 8>(dk);
    zero_acc<HS / 8>(dv);
    const int krow0 = k0 + warp * 16 + g;
    for (int i = kt; i < ntiles; i++) {
        const int buf = (i - kt) & 1;
        if (i + 1 < ntiles) {
            prefetch(i + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int q0 = i * ATT_TILE;
        uint32_t af[HS / 16][4];

        float st[8][4];  // S^T then P^T: rows = keys, columns = queries
        zero_acc<8>(st);
        load_a_frags<HS>(af, sK, warp, lane);
        mma_a_tileT<HS>(st, af, sQ[buf], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = nt * 8 + 2 * t + (e & 1);
                float p = fast_exp2(st[nt][e] * sl2 - sL[buf][ql]);
                if (i == kt && krow0 + (e >> 1) * 8 > q0 + ql) p = 0.f;
                st[nt][e] = p;
            }
        mma_p_tile<HS>(dv, st, sdO[buf], lane);

        float dpt[8][4];  // dP^T then dS^T
        zero_acc<8>(dpt);
        load_a_frags<HS>(af, sV, warp, lane);
        mma_a_tileT<HS>(dpt, af, sdO[buf], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ql = nt * 8 + 2 * t + (e & 1);
                dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sD[buf][ql]);
            }
        mma_p_tile<HS>(dk, dpt, sQ[buf], lane);
        // dS^T (bf16) to shared memory as [key][query], for the dQ product
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            *reinterpret_cast<uint32_t *>(&sdS.x[warp * 16 + g][nt * 8 + 2 * t]) = pack_bf16(dpt[nt][0], dpt[nt][1]);
            *reinterpret_cast<uint32_t *>(&sdS.x[warp * 16 + g + 8][nt * 8 + 2 * t]) =
                pack_bf16(dpt[nt][2], dpt[nt][3]);
        }
        __syncthreads();

        // this block's share of dQ for queries q0 + 16 warp .. + 15: dS (16 x 64 keys) @ K
        float dq[HS / 8][4];
        zero_acc<HS / 8>(dq);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t a[4];
            ldsm_x4_t(a, &sdS.x[kk * 16 + (lane & 7) + 8 * (lane >> 4)][warp * 16 + 8 * ((lane >> 3) & 1)]);
#pragma unroll
            for (int dp = 0; dp < HS / 16; dp++) {
                uint32_t bb[4];
                ldsm_x4_t(bb, &sK.x[kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)][dp * 16 + 8 * (lane >> 4)]);
                mma16816(dq[2 * dp], a, bb[0], bb[1]);
                mma16816(dq[2 * dp + 1], a, bb[2], bb[3]);
            }
        }

        // ordered accumulation: contributors kt = i, i-1, ..., 0
        int *cnt = sem + (size_t)bh * ntiles + i;
        const int rank = i - kt;
        if (rank > 0 && threadIdx.x == 0)
            while (ld_acquire(cnt) != rank) {
            }
        __syncthreads();
        const int first = rank == 0, last = kt == 0;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int q = q0 + warp * 16 + g + 8 * half;
            if (q >= T) continue;
#pragma unroll
            for (int nt = 0; nt < HS / 8; nt++) {
                const int d = nt * 8 + 2 * t;
                float2 v = make_float2(dq[nt][2 * half], dq[nt][2 * half + 1]);
                float2 *pa = reinterpret_cast<float2 *>(acc + (size_t)q * HS + d);
                if (!first) {
                    float2 o = __ldcg(pa);
                    v.x += o.x;
                    v.y += o.y;
                }
                if (last)
                    *reinterpret_cast<__nv_bfloat162 *>(dqdst + (size_t)q * rs + d) =
                        __floats2bfloat162_rn(v.x * scale, v.y * scale);
                else
                    __stcg(pa, v);
            }
        }
        if (!last) {
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) st_release(cnt, rank + 1);
        }
        __syncthreads();
    }
    bf16 *dst = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    store_rows<HS>(dst + C, rs, k0 + warp * 16, T, dk, scale, scale, lane);
    store_rows<HS>(dst + 2 * C, rs, k0 + warp * 16, T, dv, 1.f, 1.f, lane);
}

// ---------------------------------------------------------------------------

static int head_size(int C, int NH) {
    if (NH <= 0 || C % NH) die("attention: C = %d is not a multiple of the head count %d", C, NH);
    return C / NH;
}

// Backward schedule (HYBRID_ATTN_BWD): "ds" (default) dK/dV kernel that also stores dS,
// then dQ = dS K from it; "split" dK/dV kernel, then a dQ kernel that recomputes S and
// dP; "fused" the single-pass kernel with the ordered dQ accumulation. docs/cuda.md has
// the measurements.
enum { ATT_BWD_DS, ATT_BWD_SPLIT, ATT_BWD_FUSED };
static int attn_bwd_mode(void) {
    static int v = -1;
    if (v < 0) {
        static const char *const names[] = {"ds", "split", "fused"};  // (ATT_BWD_*'s order)
        v = env_choice("HYBRID_ATTN_BWD", names, 3);
#ifdef HYBRID_CUDA_EMU
        if (v == ATT_BWD_FUSED)
            die("HYBRID_ATTN_BWD=fused: its blocks wait on each other (the ordered dQ accumulation), which the CPU "
                "emulator, running blocks one after another, cannot run");
#endif
    }
    return v;
}

static int attn_occupancy(void) {
    static int v = -1;
    if (v < 0) {
        static const char *const names[] = {"3", "4"};
        v = 3 + env_choice("HYBRID_ATTN_OCC", names, 2);
    }
    return v;
}

template <int MINB, bool STORE_DS>
static void launch_dkdv(dim3 grid, bf16 *dqkv, bf16 *ds, const bf16 *dout, const bf16 *qkv, const float *lse,
                        const float *D, int T, int C, int NH, float scale) {
    const size_t smem = DKDV_SMEM(64, STORE_DS ? 1 : 0);  // above 48 KiB: launch_kernel raises the limit
    launch_kernel(attn_bwd_dkdv_kernel<64, MINB, STORE_DS>, grid, ATT_THREADS, smem, dqkv, ds, dout, qkv, lse, D, T, C,
        NH, scale * LOG2E, scale);
}

// dK/dV then dQ; ds (bf16 scratch of attn_ds_elems) selects the stored-dS dQ kernel
template <int MINB>
static void launch_split(dim3 grid, bf16 *dqkv, bf16 *ds, const bf16 *dout, const bf16 *qkv, const float *lse,
                         const float *D, int T, int C, int NH, float scale) {
    if (ds) {
        launch_dkdv<MINB, true>(grid, dqkv, ds, dout, qkv, lse, D, T, C, NH, scale);
        launch_kernel(attn_bwd_dq_ds_kernel<64>, grid, ATT_THREADS, 0, dqkv, ds, qkv, T, C, NH, scale);
        return;
    }
    launch_dkdv<MINB, false>(grid, dqkv, NULL, dout, qkv, lse, D, T, C, NH, scale);
    launch_kernel(attn_bwd_dq_kernel<64, MINB>, grid, ATT_THREADS, 0, dqkv, dout, qkv, lse, D, T, C, NH, scale * LOG2E,
        scale);
}

static int use_fast(int hs, int C, const void *a, const void *b) {
    return hs == 64 && C % 8 == 0 && is_aligned16(a) && is_aligned16(b);
}

// qkv (B, T, 3C) as the strided attention's layout: q, k, v at columns 0, C, 2C of each row
static AttnLayout packed_layout(int B, int T, int C, int NH) {
    const int hs = C / NH;
    AttnLayout L = {B, T, NH, hs, hs, 3 * C, hs, 3 * C, hs, 3 * C, hs, 1.0 / sqrt((double)hs)};
    return L;
}

// the slice of a bf16 buffer that starts `cols` elements in (the op tables pass real *)
static real *cols_in(const real *x, int cols) { return (real *)((const bf16 *)x + cols); }

void cuda_attention_forward(real *out, real *lse, const real *qkv, int B, int T, int C, int NH) {
    PROFILE("attention_fwd");
    int hs = head_size(C, NH);
    if (B <= 0 || T <= 0) return;
    float scale = 1.f / sqrtf((float)hs);
    if (cudnn_attention_selected()) {
        const AttnLayout L = packed_layout(B, T, C, NH);
        if (cudnn_attention_forward(out, lse, qkv, cols_in(qkv, C), cols_in(qkv, 2 * C), &L)) return;
    }
    if (use_fast(hs, C, out, qkv)) {
        dim3 grid((T + ATT_TILE - 1) / ATT_TILE, B * NH);
        launch_kernel(attn_fwd_kernel<64>, grid, ATT_THREADS, 0, (bf16 *)out, (float *)lse, (const bf16 *)qkv, T, C, NH,
            scale * LOG2E);
    } else {
        const AttnLayout L = packed_layout(B, T, C, NH);
        cuda_attention_qkv_forward(out, lse, qkv, cols_in(qkv, C), cols_in(qkv, 2 * C), &L);
    }
}

void cuda_attention_backward(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse, int B,
                             int T, int C, int NH) {
    PROFILE("attention_bwd");
    int hs = head_size(C, NH);
    if (B <= 0 || T <= 0) return;
    float scale = 1.f / sqrtf((float)hs);
    size_t rows = (size_t)B * NH * T;
    float *D = NULL;
    bf16 *ds = NULL;
    if (cudnn_attention_selected()) {
        const AttnLayout L = packed_layout(B, T, C, NH);
        if (cudnn_attention_backward(dqkv, cols_in(dqkv, C), cols_in(dqkv, 2 * C), dout, qkv, cols_in(qkv, C),
                                     cols_in(qkv, 2 * C), out, lse, &L))
            return;
    }
    if (!(use_fast(hs, C, dqkv, qkv) && is_aligned16(dout))) {
        const AttnLayout L = packed_layout(B, T, C, NH);
        cuda_attention_qkv_backward(dqkv, cols_in(dqkv, C), cols_in(dqkv, 2 * C), dout, qkv, cols_in(qkv, C),
                                    cols_in(qkv, 2 * C), out, lse, &L);
        return;
    }
    const int mode = attn_bwd_mode();
    if (mode != ATT_BWD_FUSED) {
        // scratch: D | (ds mode) the dS^T tiles
        const int nt = (T + ATT_TILE - 1) / ATT_TILE;
        size_t off_ds = (rows * sizeof(float) + 255) & ~(size_t)255;
        size_t ds_elems = mode == ATT_BWD_DS ? (size_t)B * NH * nt * (nt + 1) / 2 * ATT_TILE * ATT_TILE : 0;
        char *s = (char *)scratch_get(off_ds + ds_elems * sizeof(bf16));
        D = (float *)s;
        if (ds_elems) ds = (bf16 *)(s + off_ds);
        launch_kernel(attn_bwd_d_kernel, (unsigned)((rows + 255) / 256), 256, 0, D, (const bf16 *)dout,
            (const bf16 *)out, B, T, C, NH);
    }
    dim3 grid((T + ATT_TILE - 1) / ATT_TILE, B * NH);
    if (mode != ATT_BWD_FUSED) {
        // HYBRID_ATTN_OCC=4: the 128-register builds (4 blocks per SM, a few spills)
        if (attn_occupancy() == 4)
            launch_split<4>(grid, (bf16 *)dqkv, ds, (const bf16 *)dout, (const bf16 *)qkv, (const float *)lse, D,
                            T, C, NH, scale);
        else
            launch_split<3>(grid, (bf16 *)dqkv, ds, (const bf16 *)dout, (const bf16 *)qkv, (const float *)lse, D,
                            T, C, NH, scale);
    } else {
        const size_t smem = FUSED_SMEM(64);  // above 48 KiB: launch_kernel raises the limit
        // scratch: D | counters | fp32 dQ accumulator
        size_t ntl = (size_t)grid.x * grid.y;
        size_t off_sem = (rows * sizeof(float) + 255) & ~(size_t)255;
        size_t off_acc = (off_sem + ntl * sizeof(int) + 255) & ~(size_t)255;
        char *s = (char *)scratch_get(off_acc + rows * 64 * sizeof(float));
        float *Dd = (float *)s;
        int *sem = (int *)(s + off_sem);
        float *acc = (float *)(s + off_acc);
        launch_kernel(attn_bwd_d_kernel, (unsigned)((rows + 255) / 256), 256, 0, Dd, (const bf16 *)dout,
            (const bf16 *)out, B, T, C, NH);
        CUDA_CHECK(cudaMemsetAsync(sem, 0, ntl * sizeof(int), g_cuda.stream));
        launch_kernel(attn_bwd_fused_kernel<64>, grid, ATT_THREADS, smem, (bf16 *)dqkv, (const bf16 *)dout,
            (const bf16 *)qkv, (const float *)lse, Dd, acc, sem, T, C, NH, scale * LOG2E, scale);
    }
}
