// What the two kinds of tensor-core gradient kernel of the chunkwise backward share
// (docs/delta-rule.md, "Stage B4: intra-chunk decay gradients", "Stable decay exponents" and
// "CUDA kernels"): the grad1 / grad2 pair (chunk_grad1_mma.cu, chunk_grad2_mma.cu, the
// default) and the single reference kernel (chunk_grad_ref_mma.cu, HYBRID_DR_GRAD_REF=1). Both
// compute B4 the same way, so the stage's pieces live here: the A fragments of dA, dL
// (dr_b4_frag_a), the exact diagonal blocks (dr_b4_diag), the column permutation of grad2's
// Gamma layout that dr_b4_diag reads under GSW (dr_gsw), and the row addressing macros of the
// (B, T, H, K / V) inputs that every gradient kernel uses (ROWQK, ROWV, Q, KK, VV, DO: they
// expect tok0, H, h, K, V and q, k, v, dout in scope); and the column-pair loads and stores of
// grad1's and grad2's epilogues (dr_ld_pair, dr_st_pair).
#ifndef HYBRID_KERNELS_DELTA_RULE_CHUNK_GRAD_CUH
#define HYBRID_KERNELS_DELTA_RULE_CHUNK_GRAD_CUH

#include "kernels/delta_rule/chunk.cuh"

#define ROWQK(r) (((size_t)(tok0 + (r)) * H + h) * K)
#define ROWV(r) (((size_t)(tok0 + (r)) * H + h) * V)
#define Q(r, i) dr_ld(q + ROWQK(r) + (i))
#define KK(r, i) dr_ld(k + ROWQK(r) + (i))
#define VV(r, j) dr_ld(v + ROWV(r) + (j))
#define DO(r, j) dr_ld(dout + ROWV(r) + (j))

// G's column of channel i in grad2's Gamma tile (G [64][grad2_lg(K)], chunk_grad2_mma.cu): the
// 8-column groups 32..47 and 48..63 of every 64 swap halves, so the fill's reads of columns
// i0 + 16 w + 8 hf + (0..7), w = 0..3, in one row (w = 0 and 2 on the same 8 banks before: a
// 2-way conflict) take the 32 banks once; a warp's 32 consecutive channels (aligned to 32) stay
// one permutation of 32 banks
__device__ __forceinline__ int dr_gsw(int i) { return i ^ ((i >> 2) & 8); }

// B4's A fragments at row block t0, k-step kk: dA and dL (one bf16 each: their lo parts were
// dropped in branch dr-fewer-mma, docs/delta-rule.md, "Accuracy: the per-operand audit"), as
// stored for the row terms, transposed (dr_lda_t) for the column terms; the same loads in both
// gradient kernels.
template <bool TRANS>
__device__ __forceinline__ void dr_b4_frag_a(uint32_t ah[4], uint32_t lh[4], const bf16 *Ah, const bf16 *Lh, int LT,
                                             int t0, int kk, int lane) {
    if (TRANS) {
        dr_lda_t(ah, Ah, LT, t0, kk * 16, lane);
        dr_lda_t(lh, Lh, LT, t0, kk * 16, lane);
    } else {
        dr_lda(ah, Ah, LT, t0, kk * 16, lane);
        dr_lda(lh, Lh, LT, t0, kk * 16, lane);
    }
}

// Stage B4 inside the diagonal blocks, exactly (docs/delta-rule.md, "Stage B4: intra-chunk
// decay gradients" and "Stable decay exponents"): the pairs 16B <= c < r < 16B + 16 of each
// block B, whose factored form (exp(Gamma_ref - Gamma_c) with c past the reference row) would
// overflow once the gate passes ~6 nats a token. Task (block B, channel i): the block's q, k and
// the 15 per-token factors f_t = exp(Gamma_t - Gamma_{t-1}) of channel i in registers (every
// exponent a gate, <= 0: fp32's running sum of gates <= 0 never rises), each pair's decay
// E = exp(Gamma_r - Gamma_c) the running product f_r f_{r-1} .. f_{c+1} down c = r-1..0 (a
// multiply a pair instead of an exponential, as the forward's dr_prep_diag_block):
//   w = dA[r][c] q_r + dL[r][c] beta_r k_r;   dq_r += dA[r][c] k_c E;   rho_r += dL[r][c] k_c E;
//   col_c += w E;   x = w k_c E: dGamma_r += x, dGamma_c -= x (one x for both roles);
// then dk_r += beta_r rho_r, dk_c += col_c, and dbeta_r += rho_r . k_r over the channels (one
// warp reduce-scatter of the block's 16 rows per 32 channels into dbd[r][i / 32], added to db
// in channel-group order). The rows go from the last up, so row r's column sums are complete
// when its row terms are: each element of dQ, dK, dG is loaded once, a row ahead of its one
// store (a load issued after a store to a possibly aliasing address would wait for it). dA, dL:
// [64][64] (the diagonal blocks' strict lower parts read, once, into ds); G: Gamma [64][K];
// dbd: [64][8] scratch (K <= 256); ds: [2][4][16][16] fp32 shared scratch (16-byte aligned),
// so the inner loop reads broadcast 16-byte shared loads whether dA, dL are in global memory
// (grad2) or shared (the single kernel). q, k: the chunk's row 0 of this head, row t at
// + t * ldqk (the (B, T, H, K) inputs in global memory, ldqk = H K, for the single kernel; the
// chunk's tiles staged in shared memory, ldqk = their row stride, for grad2). GSW: G in grad2's
// layout (row stride LG, columns dr_gsw), else [64][K]. Called by the whole block after a
// barrier that completes dQ, dK, dG and db; ends after one.
template <bool GSW = false>
__device__ void dr_b4_diag(const float *dA, const float *dL, const float *G, const float *bs, const bf16 *q,
                           const bf16 *k, size_t ldqk, float *dQ, float *dK, float *dG, float *db, float *dbd,
                           float *ds, int n, int K, int LG = 0) {
    const int tid = threadIdx.x, lane = tid & 31, C = DR_BT, KC = (K + 31) & ~31;
    for (int e = tid; e < 2 * 4 * 256; e += DR_THREADS) {  // ds[m][B][r][c] = (m ? dL : dA)[16B + r][16B + c]
        const int m = e >> 10, B = (e >> 8) & 3, r = (e >> 4) & 15, c = e & 15, o = (16 * B + r) * C + 16 * B + c;
        ds[e] = m ? dL[o] : dA[o];
    }
    __syncthreads();
    for (int e = tid; e < 4 * KC; e += DR_THREADS) {  // KC, DR_THREADS multiples of 32: a warp shares B
        const int B = e / KC, t0 = 16 * B, i = e % KC;
        const bool live = i < K;
        float kv[16], f[16], col[16], dgc[16], p[16];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int t = t0 + j;
            const bool in = live && t < n;
            kv[j] = in ? dr_ld(k + (size_t)t * ldqk + i) : 0.f;
            f[j] = in ? G[GSW ? t * LG + dr_gsw(i) : t * K + i] : 0.f;  // Gamma for now
            col[j] = dgc[j] = p[j] = 0.f;
        }
        // row 15's q and accumulators, in flight with k
        float qr = 0.f, oq = 0.f, ok = 0.f, og = 0.f;
        if (live && t0 + 15 < n) {
            const int x = (t0 + 15) * K + i;
            qr = dr_ld(q + (size_t)(t0 + 15) * ldqk + i), oq = dQ[x], ok = dK[x], og = dG[x];
        }
#pragma unroll
        for (int j = 15; j >= 1; j--) {  // (unconditional, then the select: chunk.cuh's dr_exp_note)
            const float e = dr_eval(dr_exp(f[j] - f[j - 1]));
            f[j] = t0 + j < n ? e : 0.f;
        }
        const float4 *a4 = (const float4 *)(ds + 256 * B), *l4 = (const float4 *)(ds + 1024 + 256 * B);
#pragma unroll
        for (int r = 15; r >= 0; r--) {
            const int t = t0 + r;
            float nqr = 0.f, nq = 0.f, nk = 0.f, ng = 0.f;  // row r - 1's, loaded before row r's stores
            if (r > 0 && live && t - 1 < n) {
                const int x = (t - 1) * K + i;
                nqr = dr_ld(q + (size_t)(t - 1) * ldqk + i), nq = dQ[x], nk = dK[x], ng = dG[x];
            }
            if (t < n) {  // the same for the whole warp
                if (r > 0) {
                    float a[16], l[16];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        if (4 * u < r) {
                            const float4 av = a4[4 * r + u], lv = l4[4 * r + u];
                            a[4 * u] = av.x, a[4 * u + 1] = av.y, a[4 * u + 2] = av.z, a[4 * u + 3] = av.w;
                            l[4 * u] = lv.x, l[4 * u + 1] = lv.y, l[4 * u + 2] = lv.z, l[4 * u + 3] = lv.w;
                        }
                    const float br = bs[t], bk = br * kv[r];
                    float dq = 0.f, rho = 0.f, xr = 0.f, E = 1.f;
#pragma unroll
                    for (int c = r - 1; c >= 0; c--) {
                        E *= f[c + 1];
                        const float kcE = kv[c] * E, w = a[c] * qr + l[c] * bk, x = w * kcE;
                        dq += a[c] * kcE;
                        rho += l[c] * kcE;
                        col[c] += w * E;
                        xr += x;
                        dgc[c] -= x;
                    }
                    oq += dq;
                    ok += br * rho;
                    og += xr;
                    p[r] = rho * kv[r];
                }
                if (live) {
                    const int x = t * K + i;
                    if (r > 0) dQ[x] = oq;
                    dK[x] = ok + col[r];
                    dG[x] = og + dgc[r];
                }
            }
            qr = nqr, oq = nq, ok = nk, og = ng;
        }
        // dbeta: reduce-scatter the 16 rows' partials over the warp (16 shuffles, not 15 warp
        // sums); lane l ends with row l % 16's sum over the 32 channels
        dr_rs_step<8>(p, lane);
        dr_rs_step<4>(p, lane);
        dr_rs_step<2>(p, lane);
        dr_rs_step<1>(p, lane);
        p[0] += __shfl_xor_sync(0xffffffffu, p[0], 16);
        if (lane < 16) dbd[(t0 + lane) * 8 + i / 32] = p[0];
    }
    __syncthreads();
    if (tid < n) {
        float acc = 0.f;
        for (int g8 = 0; g8 < KC / 32; g8++) acc += dbd[tid * 8 + g8];
        db[tid] += acc;
    }
    __syncthreads();
}

// Elements i, i + 1 of a row, as one access where vec (i even, K even, the rows aligned to
// the pair), else two; in0 / in1 whether each is in (with vec both or neither); 0 where not.
__device__ __forceinline__ void dr_ld_pair(const float *p, bool vec, bool in0, bool in1, float &a, float &b) {
    if (vec) {
        const float2 v = in0 ? *(const float2 *)p : make_float2(0.f, 0.f);
        a = v.x, b = v.y;
    } else {
        a = in0 ? p[0] : 0.f;
        b = in1 ? p[1] : 0.f;
    }
}
__device__ __forceinline__ void dr_ld_pair(const bf16 *p, bool vec, bool in0, bool in1, float &a, float &b) {
    if (vec) {
        const float2 v = in0 ? bf16x2_to_float2(*(const uint32_t *)p) : make_float2(0.f, 0.f);
        a = v.x, b = v.y;
    } else {
        a = in0 ? __bfloat162float(p[0]) : 0.f;
        b = in1 ? __bfloat162float(p[1]) : 0.f;
    }
}
__device__ __forceinline__ void dr_st_pair(float *p, bool vec, bool in0, bool in1, float a, float b) {
    if (vec) {
        if (in0) *(float2 *)p = make_float2(a, b);
    } else {
        if (in0) p[0] = a;
        if (in1) p[1] = b;
    }
}
// (dr_st rounds each element as __floats2bfloat162_rn does)
__device__ __forceinline__ void dr_st_pair(bf16 *p, bool vec, bool in0, bool in1, float a, float b) {
    if (vec) {
        if (in0) *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
    } else {
        if (in0) p[0] = __float2bfloat16(a);
        if (in1) p[1] = __float2bfloat16(b);
    }
}

#endif
