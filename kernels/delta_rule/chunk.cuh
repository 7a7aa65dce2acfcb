// The chunkwise delta rule on CUDA (KDA, GDN, DeltaNet; docs/delta-rule.md, "Chunkwise
// forward" and "Chunkwise backward"): shared constants, the workspace layouts, device helpers
// and the host entry points shared by chunk_fwd*.cu, chunk_bwd*.cu, chunk_bwalk_mma.cu and
// chunk_grad*.cu.
//
// Decomposition (fla's): chunk-local work runs chunk-parallel, one block per (chunk, head);
// only the inter-chunk state recurrence is sequential, one block per (sequence, head, V-tile)
// walking that sequence's chunks in order (V columns of the state are independent):
//   forward   prep   (chunk, head)          Gamma, Qg, Ke, Aqk, T = (I+L)^-1, W, U
//             walk   (seq, head, V-tile)    h[n] saved, Delta = U - W h[n], h[n+1], hT
//             output (chunk, head, V-tile)  o = scale Qg h[n] + Aqk Delta
//   backward  prep + walk again (recompute, docs/delta-rule.md "Recomputation in the backward")
//             bwalk  (seq, head, V-tile)    dH' = dL/dh[n+1] saved, complete dDelta, dh[n], dh0
//             grad1  (chunk, head)          stages B1, B3, the triangular inverse -> dA, dL
//             grad2  (chunk, head)          stages B4, B6 (tensor cores; SIMT: one grad kernel)
// Chunk size 64 only; K, V <= 256.
//
// Two implementations of that decomposition:
//  - tensor cores (chunk_prep_mma.cu, chunk_fwd_mma.cu; chunk_bwd_mma.cu, the backward's entry,
//    with its reverse walk chunk_bwalk_mma.cu and gradient kernels chunk_grad1_mma.cu,
//    chunk_grad2_mma.cu, chunk_grad_ref_mma.cu and chunk_grad.cuh; the table's members): every product as bf16 mma.m16n8k16 with fp32
//    accumulation (kernels/mma.cuh), tiles in shared memory padded
//    to 16 in K and V and by 8 bf16 a row (ldmatrix without bank conflicts), global -> shared
//    by cp.async. Accuracy: the operands of the state chain that are not exact in bf16 are split
//    hi + lo (dr_split; the thirteen of split_operand.h) and a product of two such is three
//    MMAs (dr_mma3: hi hi + hi lo + lo hi, ~16 mantissa bits), two where one side is exact or
//    one bf16 (dr_mma2; q, k, v, dO exact): so the states hT, dh0 keep the fp32 kernels' 1e-4
//    and o, the gradients the bf16 I/O rounding only (tests/gpu/test_delta_rule.c). One bf16
//    MMA for every product (fla's arithmetic) is 3x cheaper on the tensor cores but puts hT at
//    ~3e-3 and o at ~4e-3; it is the default since session 27 (HYBRID_DR_BF16 unset or 1; =0 the
//    split products: the template flag LO below, dr_mma3x; docs/delta-rule.md, "The default
//    arithmetic").
//    Which operands need their lo part: docs/delta-rule.md, "Accuracy: the per-operand audit"
//    (the hook: dr_lo below, split_operand.h). One bf16 since branch
//    dr-fewer-mma: the gradient kernels' operands that feed no state, grad1's T^T, dW, K_b (dW
//    Kb^T, T^T dW: one MMA; T^T dDelta: two) and all of grad2's B4 operands (dA, dL, K_c, Q_r,
//    beta K_r: one MMA), and for GDN and DeltaNet the prep's A_qk / L operands below the
//    diagonal blocks (Q_r, K_r, K_c: one MMA; KDA keeps them hi + lo).
//    Decay factors by 16-row reference blocks (Gamma_ref at a block boundary), so no exponent
//    exceeds 15 tokens of decay and there is no exponential per (row, column, channel). The
//    triangular inverse stays fp32 SIMT (blockwise, in place). The states h and dH' live in
//    registers of the walks as fp32 accumulators.
//  - SIMT fp32 (chunk_fwd.cu, chunk_bwd.cu): the first port, the reference and the fallback
//    (cuda_delta_chunk_forward_simt / _backward_simt; the fp32-I/O accuracy entry).
#ifndef HYBRID_KERNELS_DELTA_RULE_CHUNK_CUH
#define HYBRID_KERNELS_DELTA_RULE_CHUNK_CUH

#include <stdlib.h>

#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/seq_index.cuh"
#include "kernels/delta_rule/split_operand.h"
#include "kernels/mma.cuh"

#define DR_BT 64        // chunk size (fla's); the only one these kernels take
#define DR_THREADS 256  // threads of every chunk kernel (8 warps)
#define DR_MAX_DIM 256  // K and V limit
#define DR_BK 32        // SIMT prep: K tile of the Aqk / L products
#define DR_BV 32        // SIMT: V tile of the walks and the output kernel

static_assert((DR_BT * DR_BT) % DR_THREADS == 0, "prep kernel: whole (r, c) entries per thread");

// gate modes (model/ops/delta_rule/internal.h's DR_GATE_*): g ignored / (B,T,H) / (B,T,H,K)
enum { DRG_NONE = 0, DRG_HEAD = 1, DRG_CHANNEL = 2 };

// ---- chunk slots -----------------------------------------------------------------------
// Sequence s = rows [bos_s, bos_s + len_s) owns ceil(len_s / 64) chunk slots starting at
// base_s = floor(bos_s / 64) + s (the CPU's dr_state_slot numbering): consecutive sequences
// never overlap and base_s is non-decreasing, so a chunk-parallel block finds its sequence by
// a binary search over offsets on the device (no host copy of offsets, no table). Slots that
// belong to no chunk (gaps, empty sequences) exit at once. Total slots:
// floor(B*T / 64) + N. Every per-chunk workspace array is indexed by (slot * H + head).
static inline size_t dr_num_slots(int B, int T, int N) { return (size_t)B * (size_t)T / DR_BT + (size_t)N; }

__device__ __forceinline__ void dr_seq_range(const int *offsets, int T, int s, int *bos, int *len) {
    if (offsets) {
        *bos = offsets[s];
        *len = offsets[s + 1] - offsets[s];
    } else {
        *bos = s * T;
        *len = T;
    }
}
__device__ __forceinline__ int dr_seq_base(int bos, int s) { return bos / DR_BT + s; }

// Finds the chunk of slot x: its sequence s, first row tok0, row count n (1..64). Returns 0 if
// the slot holds no chunk. (The slot numbering and the search: seq_index.cuh's chunk_of_slot,
// shared with the chunked linear attention.)
__device__ __forceinline__ int dr_locate_chunk(const int *offsets, int T, int N, int x, int *s_out, int *tok0,
                                               int *n) {
    size_t t0;
    int ci;
    if (!chunk_of_slot(offsets, N, T, DR_BT, x, s_out, &t0, n, &ci)) return 0;
    *tok0 = (int)t0;
    return 1;
}

// ---- SIMT workspace layout (fp32; per (slot, head) blocks, slot-major, head inside) -----
// forward (and the backward's recompute):
//   G   [64][K]  Gamma, the inclusive in-chunk cumsum of g (rows >= n unused)
//   Qg  [64][K]  q ⊙ exp(Gamma)
//   Ke  [64][K]  k ⊙ exp(Gamma_end - Gamma)
//   W   [64][K]  T diag(beta) (k ⊙ exp(Gamma))
//   Aqk [64][64] scale · q_r·(k_c ⊙ exp(Gamma_r - Gamma_c)), c <= r (0 above)
//   Tm  [64][64] T = (I + L)^-1 (unit lower; 0 above)
//   U   [64][V]  T diag(beta) V
//   D   [64][V]  Delta = U - W h[n]
//   h   [K][V]   h[n], the state entering the chunk
// backward only (after the above):
//   dh  [K][V]   dL/dh[n+1], the state gradient leaving the chunk
//   dD  [64][V]  the complete dDelta (B1 local part + Ke dh[n+1])
//   dQ, dK, dG, dW [64][K]  the gradient kernel's fp32 accumulators
struct DrWs {
    float *G, *Qg, *Ke, *W, *Aqk, *Tm, *U, *D, *h;
    float *dh, *dD, *dQ, *dK, *dG, *dW;
};

// Binds the arrays of the layout above at base (NULL: sizes only); returns the bytes.
static inline size_t dr_ws_bind(DrWs *w, void *base, int backward, size_t slots_heads, int K, int V) {
    const size_t C = DR_BT, sk = C * K * slots_heads, sc = C * C * slots_heads, sv = C * V * slots_heads,
                 skv = (size_t)K * V * slots_heads;
    const size_t sizes[15] = {sk, sk, sk, sk, sc, sc, sv, sv, skv, skv, sv, sk, sk, sk, sk};
    float **ptrs[15] = {&w->G, &w->Qg, &w->Ke, &w->W, &w->Aqk, &w->Tm, &w->U, &w->D, &w->h,
                        &w->dh, &w->dD, &w->dQ, &w->dK, &w->dG, &w->dW};
    const int count = backward ? 15 : 9;
    size_t off = 0;
    for (int a = 0; a < 15; a++) {
        float *p = (a < count && base) ? (float *)((char *)base + off * sizeof(float)) : NULL;
        *ptrs[a] = p;
        if (a < count) off += (sizes[a] + 63) & ~(size_t)63;  // 256-byte aligned arrays
    }
    return off * sizeof(float);
}

// ---- element access: the kernels are templated on the I/O element type (bf16 on the
// ---- backend; float for the fp32-I/O accuracy check of the forward) ----
__device__ __forceinline__ float dr_ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float dr_ld(const float *p) { return *p; }
__device__ __forceinline__ void dr_st(bf16 *p, float x) { *p = __float2bfloat16(x); }
__device__ __forceinline__ void dr_st(float *p, float x) { *p = x; }

// log-decay of channel i of head h at token tok
template <typename T>
__device__ __forceinline__ float dr_gate(const T *g, int gate, size_t tok, int h, int i, int H, int K) {
    if (gate == DRG_CHANNEL) return dr_ld(g + (tok * H + h) * K + i);
    if (gate == DRG_HEAD) return dr_ld(g + tok * H + h);
    return 0.f;
}

// One step of a warp reduce-scatter of 2H slots v[0..2H-1]: a lane keeps the half that its lane
// bit H selects and adds the partner's copy of it; after H = 16, 8, .. 1 lane l holds the
// warp's total of slot l of 32 (a fixed tree: deterministic); from H = 8 down, of slot l % 16
// of 16 over the 16 lanes of its half (one more xor-16 shuffle adds the other half). A
// template a step: with a runtime loop over H, nvcc left v in local memory.
template <int H> __device__ __forceinline__ void dr_rs_step(float *v, int lane) {
    const bool up = lane & H;
#pragma unroll
    for (int j = 0; j < H; j++) {
        const float send = up ? v[j] : v[j + H], keep = up ? v[j + H] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, H);
    }
}

// Gradient of the triangular inverse (docs/delta-rule.md, "Gradient of the triangular
// inverse"), block-wide on [64][64] fp32 tiles in shared memory, for both gradient kernels:
// tmp = P_sl(dT) T^T, tmp[m][c] = sum_{p<=min(c,m-1)} dT[m][p] T[c][p]; then
// dL = -P_sl(T^T tmp), dL[r][c] = -sum_{m>=r} T[m][r] tmp[m][c] for c < r < n, written over dT.
// Without TmT (the SIMT kernel): a thread an entry, the 32 lanes of a warp 32 consecutive c of
// one row m; reading T[c][p] straight from Tm puts all 32 lanes on one bank (a row is 64
// floats), a 32-way conflict on every term. A caller with 16.25 KiB of shared memory to spare
// passes TmT ([64][65] fp32), which first receives T^T (TmT[p][c] = T[c][p]; the row stride 65
// keeps both the transposing stores and the row reads conflict-free), and each thread then
// takes a 2x2 block, rows m, m + 1 and columns c, c + 32 (c = lane): four loads for four terms
// instead of eight. Every entry's sum has the same nonzero terms in the same order (p, m
// ascending; the SIMT path skips a term outside an entry's range, the TmT path adds it where it
// is a product with an exact zero, which changes no bit), so dL is bit-identical either way.
// Row pairs k (rows 2k, 2k + 1) cost ~2k + 2 (tmp) and ~64 - 2k (dL) terms; warp w takes the
// pairs w, 15 - w, 16 + w, 31 - w, the same total for every warp. Ends after a barrier.
__device__ __forceinline__ void dr_tri_inverse_grad(float *dT, const float *Tm, float *tmp, int n,
                                                    float *TmT = NULL) {
    const int tid = threadIdx.x, C = DR_BT;
    if (!TmT) {
        for (int e = tid; e < C * C; e += DR_THREADS) {
            const int m = e / C, c = e % C, pmax = c < m - 1 ? c : m - 1;
            float acc = 0.f;
            for (int p = 0; p <= pmax; p++) acc += dT[m * C + p] * Tm[c * C + p];
            tmp[e] = acc;
        }
        __syncthreads();
        for (int e = tid; e < C * C; e += DR_THREADS) {
            const int r = e / C, c = e % C;
            float acc = 0.f;
            if (c < r && r < n)
                for (int m = r; m < n; m++) acc += Tm[m * C + r] * tmp[m * C + c];
            dT[e] = -acc;
        }
        __syncthreads();
        return;
    }
    static_assert(DR_THREADS == 256 && DR_BT == 64, "2x2 blocks: 8 warps of 4 row pairs, 32 lanes of 2 columns");
    const int LT = C + 1, lane = tid & 31, warp = tid >> 5;
    // T^T, and dT's entries p >= m zeroed (P_sl(dT) in place: nothing reads dT's upper part
    // after this product, and dL overwrites all of dT)
    for (int e = tid; e < C * C; e += DR_THREADS) {
        TmT[(e % C) * LT + e / C] = Tm[e];
        if (e % C >= e / C) dT[e] = 0.f;
    }
    __syncthreads();
    const int c0 = lane, c1 = lane + 32;
#pragma unroll 1
    for (int u = 0; u < 4; u++) {
        const int k = u == 0 ? warp : u == 1 ? 15 - warp : u == 2 ? 16 + warp : 31 - warp, m = 2 * k;
        // Every entry sums p = 0 .. m, the same count for all lanes (row m + 1's last term is at
        // p = m): the terms past an entry's own last p, min(c, row - 1), are products with an
        // exact zero (T[c][p] = 0 for p > c: T is stored lower triangular; P_sl(dT)[row][p] = 0
        // for p >= row), and adding a zero product changes no bit of an fp32 sum (an
        // accumulator from +0 is never -0). Until session 16 each term had its own bound check
        // and each lane its own trip count (min(c1, m)): three compares and a branch for four
        // terms. (dT's rows as 16-byte broadcasts, four p a step, cost 24 bytes of spills in
        // grad1 and were not kept.) Finite operands assumed: a non-finite dT entry now also
        // reaches the entries whose T zeros met it.
        float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
        const float *d0p = dT + m * C, *d1p = d0p + C;
#pragma unroll 4
        for (int p = 0; p <= m; p++) {
            const float d0 = d0p[p], d1 = d1p[p], t0 = TmT[p * LT + c0], t1 = TmT[p * LT + c1];
            a00 += d0 * t0;
            a01 += d0 * t1;
            a10 += d1 * t0;
            a11 += d1 * t1;
        }
        tmp[m * C + c0] = a00;
        tmp[m * C + c1] = a01;
        tmp[(m + 1) * C + c0] = a10;
        tmp[(m + 1) * C + c1] = a11;
    }
    __syncthreads();
#pragma unroll 1
    for (int u = 0; u < 4; u++) {
        const int k = u == 0 ? warp : u == 1 ? 15 - warp : u == 2 ? 16 + warp : 31 - warp, r = 2 * k;
        // entry (row, c) live for c < row < n; row r's sum starts at m = r, row r + 1's at r + 1
        const bool l00 = c0 < r && r < n, l01 = c1 < r && r < n, l10 = c0 < r + 1 && r + 1 < n,
                   l11 = c1 < r + 1 && r + 1 < n;
        float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
        if (r < n) {
            const float t0 = Tm[r * C + r], x0 = tmp[r * C + c0], x1 = tmp[r * C + c1];
            if (l00) a00 += t0 * x0;
            if (l01) a01 += t0 * x1;
        }
#pragma unroll 4
        for (int m = r + 1; m < n; m++) {  // (T's entries r, r + 1 of row m as one 8-byte load: r is even)
            const float2 t = *reinterpret_cast<const float2 *>(Tm + m * C + r);
            const float t0 = t.x, t1 = t.y, x0 = tmp[m * C + c0], x1 = tmp[m * C + c1];
            if (l00) a00 += t0 * x0;
            if (l01) a01 += t0 * x1;
            if (l10) a10 += t1 * x0;
            if (l11) a11 += t1 * x1;
        }
        dT[r * C + c0] = -a00;
        dT[r * C + c1] = -a01;
        dT[(r + 1) * C + c0] = -a10;
        dT[(r + 1) * C + c1] = -a11;
    }
    __syncthreads();
}

// dGamma's in-chunk term q dq - k dk of one entry, with q dq fused and k dk rounded: written as
// `q * dq - k * dk` it left ptxas the choice of the product to fuse (the machine code fused q dq,
// the same as this fma), and the split gradient kernels, the single one and the scalar backward
// must choose alike (tests/check_contraction.py; docs/delta-rule.md, "CUDA kernels")
__device__ __forceinline__ float dr_dg_term(float q, float dq, float k, float dk) {
    return __fmaf_rn(q, dq, -(k * dk));
}

// ---- the gradient kernels' last stage (SIMT and tensor-core alike) ------------------------
// B6 (docs/delta-rule.md, "Stage B6: reverse in-chunk cumsum of the gate gradient"): the
// dGamma_end extras (gend) land on the last row, then dg = reverse in-chunk cumsum of dGamma;
// then the chunk's dq, dk, dg (KDA per channel; GDN per head, the sum over K a warp per row)
// and dbeta are stored. dQ, dK, dG are the chunk's [n][K] fp32 accumulators, db [n]. Called by
// the whole block (DR_THREADS threads) after a barrier that completes dQ, dK, dG and db.
// B6's reverse in-chunk cumsum of dGamma [n][K] in place, the dGamma_end extras (gend) added to
// the last row first; a thread a channel, rows by batches of 16 loaded before they are stored.
// The caller syncs after it.
__device__ __forceinline__ void dr_grad_cumsum(float *dG, const float *gend, int n, int K) {
    for (int i = threadIdx.x; i < K; i += DR_THREADS) {
        float acc = 0.f;
        for (int r1 = n - 1; r1 >= 0; r1 -= 16) {  // rows r1, r1 - 1, .., r1 - 15
            // the loads unconditional (a row before 0 reads row 0, and its value is dropped): a
            // conditional load can compile to a branch with the load's use right behind it, one
            // global round trip a row (grad1's step 4 did, Nsight Compute in session 13)
            float v[16];
#pragma unroll
            for (int u = 0; u < 16; u++) {
                const float x = dG[(r1 - u >= 0 ? r1 - u : 0) * K + i];
                v[u] = r1 - u >= 0 ? x : 0.f;
            }
            if (r1 == n - 1) v[0] += gend[i];
#pragma unroll
            for (int u = 0; u < 16; u++)
                if (r1 - u >= 0) {
                    acc += v[u];
                    dG[(r1 - u) * K + i] = acc;
                }
        }
    }
}
// The last stores of B6: GDN's per-head dg (the sum over K of dGamma, a warp per row) and dbeta.
__device__ __forceinline__ void dr_grad_store_head_beta(bf16 *dg, bf16 *dbeta, const float *dG, const float *db,
                                                        int gate, int n, int tok0, int H, int h, int K) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, NW = DR_THREADS / 32;
    if (gate == DRG_HEAD && dg)
        for (int r = warp; r < n; r += NW) {
            float acc = 0.f;
            for (int i = lane; i < K; i += 32) acc += dG[r * K + i];
            acc = warp_sum(acc);
            if (lane == 0) dr_st(dg + (size_t)(tok0 + r) * H + h, acc);
        }
    for (int r = tid; r < n; r += DR_THREADS) dr_st(dbeta + (size_t)(tok0 + r) * H + h, db[r]);
}

__device__ __forceinline__ void dr_grad_finish(bf16 *dq, bf16 *dk, bf16 *dg, bf16 *dbeta, float *dQ, float *dK,
                                               float *dG, const float *db, const float *gend, int gate, int n,
                                               int tok0, int H, int h, int K) {
    const int tid = threadIdx.x;
    // Both passes load a batch before they store it: a load after a store to a possibly
    // aliasing address waits for that store (a global round trip per element otherwise).
    dr_grad_cumsum(dG, gend, n, K);
    __syncthreads();
    const int chan = gate == DRG_CHANNEL && dg;
    for (int e0 = tid; e0 < n * K; e0 += 4 * DR_THREADS) {  // 4 elements a thread a batch
        float vq[4], vk[4], vg[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * DR_THREADS;
            vq[u] = e < n * K ? dQ[e] : 0.f;
            vk[u] = e < n * K ? dK[e] : 0.f;
            vg[u] = chan && e < n * K ? dG[e] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * DR_THREADS, r = e / K, i = e % K;
            if (e >= n * K) break;
            const size_t row = ((size_t)(tok0 + r) * H + h) * K;
            dr_st(dq + row + i, vq[u]);
            dr_st(dk + row + i, vk[u]);
            if (chan) dr_st(dg + row + i, vg[u]);
        }
    }
    dr_grad_store_head_beta(dg, dbeta, dG, db, gate, n, tok0, H, h, K);
}

// dr_grad_finish with the stores of dq, dk and (KDA) dg by 8 columns a thread: two 16-byte
// loads of each of dQ, dK, dG and one 16-byte store of each output (store8 rounds as dr_st),
// so a warp reads and writes whole rows of 32-byte sectors where the scalar loop stored 2
// bytes a lane. Needs K % 8 == 0 and dq, dk, dg 16-byte aligned (dQ, dK, dG are workspace
// arrays, 256-byte aligned); otherwise it is dr_grad_finish. The same values in the same
// operations: the same bits.
__device__ __forceinline__ void dr_grad_finish_v(bf16 *dq, bf16 *dk, bf16 *dg, bf16 *dbeta, float *dQ, float *dK,
                                                 float *dG, const float *db, const float *gend, int gate, int n,
                                                 int tok0, int H, int h, int K) {
    if (K % 8 || (((uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dg) & 15)) {
        dr_grad_finish(dq, dk, dg, dbeta, dQ, dK, dG, db, gend, gate, n, tok0, H, h, K);
        return;
    }
    const int tid = threadIdx.x;
    dr_grad_cumsum(dG, gend, n, K);
    __syncthreads();
    const int chan = gate == DRG_CHANNEL && dg, K8 = K / 8, ng = n * K8;
    for (int g0 = tid; g0 < ng; g0 += 2 * DR_THREADS) {  // 2 groups of 8 a thread a batch, loads first
        float vq[2][8], vk[2][8], vg[2][8];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int x = g0 + u * DR_THREADS, o = (x / K8) * K + (x % K8) * 8;
            const bool in = x < ng;
#pragma unroll
            for (int hlf = 0; hlf < 2; hlf++) {
                const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
                const float4 a = in ? *(const float4 *)(dQ + o + 4 * hlf) : zero,
                             b = in ? *(const float4 *)(dK + o + 4 * hlf) : zero,
                             c = in && chan ? *(const float4 *)(dG + o + 4 * hlf) : zero;
                vq[u][4 * hlf] = a.x, vq[u][4 * hlf + 1] = a.y, vq[u][4 * hlf + 2] = a.z, vq[u][4 * hlf + 3] = a.w;
                vk[u][4 * hlf] = b.x, vk[u][4 * hlf + 1] = b.y, vk[u][4 * hlf + 2] = b.z, vk[u][4 * hlf + 3] = b.w;
                vg[u][4 * hlf] = c.x, vg[u][4 * hlf + 1] = c.y, vg[u][4 * hlf + 2] = c.z, vg[u][4 * hlf + 3] = c.w;
            }
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int x = g0 + u * DR_THREADS, r = x / K8, i = (x % K8) * 8;
            if (x >= ng) break;
            const size_t row = ((size_t)(tok0 + r) * H + h) * K;
            store8(dq + row + i, vq[u]);
            store8(dk + row + i, vk[u]);
            if (chan) store8(dg + row + i, vg[u]);
        }
    }
    dr_grad_store_head_beta(dg, dbeta, dG, db, gate, n, tok0, H, h, K);
}

// ---- host side ----
// Checks the arguments common to the forward and the backward (dies on what the kernels refuse).
void dr_check_args(const char *op, LinearKind kind, int B, int T, int H, int K, int V, const int *offsets, int nseq,
                   int chunk);
static inline int dr_gate_of(LinearKind kind) {
    return kind == LINEAR_KDA ? DRG_CHANNEL : kind == LINEAR_GDN ? DRG_HEAD : DRG_NONE;
}

// The forward's prep and walk (chunk_fwd.cu): fills G..D and h of the workspace for all chunks
// and writes hT (may be NULL); the backward's recompute calls it with hT = NULL.
void dr_forward_states(int gate, float *hT, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                       const bf16 *beta, const float *h0, float scale, int B, int T, int H, int K, int V,
                       const int *offsets, int N, const DrWs *ws);

// fp32-I/O forward (q, k, v, g, beta, o all float) on the SIMT kernels (workspace:
// cuda_delta_chunk_workspace_simt bytes): the accuracy check of the fp32 arithmetic without the
// bf16 rounding of I/O.
extern "C" void cuda_delta_chunk_forward_f32io(LinearKind kind, float *o, float *hT, const float *q, const float *k,
                                               const float *v, const float *g, const float *beta, const float *h0,
                                               float scale, int B, int T, int H, int K, int V, const int *offsets,
                                               int nseq, int chunk, void *workspace);

// ---- tensor-core path (chunk_prep_mma.cu, chunk_fwd_mma.cu): bf16 tiles in shared memory, K
// ---- and V padded to multiples of 16 (zero-filled), rows padded by 8 bf16 (16 bytes: ldmatrix
// ---- conflict-free)
#define DR_PAD 8
#define DR_MBV 64        // V tile of the tensor-core walk and output kernels
// Every tensor-core kernel (prep, walk, output, reverse walk, grad1, grad2) is also built for K =
// V = DR_KV_FIXED (its template parameter KV or KC = DR_KV_FIXED; 0: K and V from the arguments),
// and its launch takes that instance where dr_kv_fixed holds: tile sizes, trip counts and the
// index divisions by K / 8 become compile-time constants, the same operations on the same values
// in the same order, so the same bits (docs/delta-rule.md, "CUDA kernels", session 17).
#define DR_KV_FIXED 128
// (the kernels write `KV ? KV : K_arg` out: through an inline helper, nvcc emitted different
// code for the grad kernels' instances)
static inline bool dr_kv_fixed(int K, int V) { return K == DR_KV_FIXED && V == DR_KV_FIXED; }
// Whole chunks: without offsets and with T a multiple of DR_BT every chunk has DR_BT rows (the
// KL models' training and the benchmarks; varlen batches and a partial last chunk do not). The
// K = V = DR_KV_FIXED instances of the prep, output, grad1 and grad2 kernels are also built with
// FULL = true, which sets the chunk's row count n to DR_BT after dr_locate_chunk found it: every
// `r < n` of a row is then known true at compile time and drops out with its select (static
// instructions of the default instances, sm_90: prep 6514 -> 6275, grad1 7131 -> 6850, grad2
// 6427 -> 5662, output 2084 -> 1987), the same operations on the same values where it held, so
// the same bits (the emulated hash_delta_rule's whole-chunk case; test_delta_rule's T = 128 and
// T = 1024 cases compare grad1 + grad2 with the single reference kernel bit for bit). Each
// kernel sets n itself after the call: set inside dr_locate_chunk, through its pointer, nvcc
// kept n a run-time value (the prep's FULL instance 6528 static instructions, not 6275).
// The walks have no FULL instances: built and measured (docs/delta-rule.md, "CUDA kernels",
// whole chunks at compile time), they ran 5-7% slower on the H200 with fewer instructions.
static inline bool dr_full_chunks(const int *offsets, int T) { return !offsets && T % DR_BT == 0; }
// the rows of chunk ci of a sequence of len tokens: DR_BT but for a partial last chunk (the loops
// over a sequence's chunks; run-time, as the walks measured slower with it fixed: above)
__device__ __forceinline__ int dr_chunk_rows(int len, int ci) {
    return len - ci * DR_BT < DR_BT ? len - ci * DR_BT : DR_BT;
}
// The instance of a kernel template KERN<LO, SPLIT, KV, FULL> (the output kernel, grad1) for a
// launch: LO, the arithmetic (a compile-time bool: dr_mma3x below); split, Delta as hi + lo pairs
// (ws.dsplit); kv128, dr_kv_fixed; full, kv128 && dr_full_chunks
#define DR_INSTANCE(KERN, LO, split, kv128, full)                 \
    ((split) ? ((full)    ? KERN<LO, true, DR_KV_FIXED, true>        \
                : (kv128) ? KERN<LO, true, DR_KV_FIXED, false>       \
                          : KERN<LO, true, 0, false>)                \
             : ((full)    ? KERN<LO, false, DR_KV_FIXED, true>       \
                : (kv128) ? KERN<LO, false, DR_KV_FIXED, false>      \
                          : KERN<LO, false, 0, false>))
#define DRM_THREADS 256  // the tensor-core prep and walk: 8 warps
__host__ __device__ __forceinline__ int dr_pad16(int x) { return (x + 15) & ~15; }

// Fragment loads (kernels/mma.cuh's layouts) from a bf16 shared-memory matrix X, row stride ld:
// A (16x16 at rows m0, cols k0) of a row-major X
__device__ __forceinline__ void dr_lda(uint32_t a[4], const bf16 *X, int ld, int m0, int k0, int lane) {
    ldsm_x4(a, X + (size_t)(m0 + (lane & 15)) * ld + k0 + 8 * (lane >> 4));
}
// A (16x16, A[m][k] = X[k][m]) of a transposed X: rows k0.., cols m0..
__device__ __forceinline__ void dr_lda_t(uint32_t a[4], const bf16 *X, int ld, int m0, int k0, int lane) {
    ldsm_x4_t(a, X + (size_t)(k0 + (lane & 7) + 8 * (lane >> 4)) * ld + m0 + 8 * ((lane >> 3) & 1));
}
// B of two 8-column tiles (k0..k0+15, n0..n0+15) of X stored [k][n]: b[0..1] the first, b[2..3] the second
__device__ __forceinline__ void dr_ldb_kn(uint32_t b[4], const bf16 *X, int ld, int k0, int n0, int lane) {
    ldsm_x4_t(b, X + (size_t)(k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + n0 + 8 * (lane >> 4));
}
// the same of X stored [n][k]
__device__ __forceinline__ void dr_ldb_nk(uint32_t b[4], const bf16 *X, int ld, int k0, int n0, int lane) {
    ldsm_x4(b, X + (size_t)(n0 + (lane & 7) + 8 * (lane >> 4)) * ld + k0 + 8 * ((lane >> 3) & 1));
}

// The precision audit's hook (docs/delta-rule.md, "Accuracy: the per-operand audit";
// split_operand.h): every split takes the tag of the operand it splits and passes the fp32
// remainder x - hi through dr_lo before rounding it to the lo part. A normal build returns it
// as it is (the same code as before the tags). Built with -DHYBRID_DR_PRECISION_AUDIT, dr_lo
// returns 0 for the operands whose bits are set in dr_audit_mask, which the host sets through
// cuda_delta_precision_audit_mask (chunk_fwd_mma.cu) and each kernel-launching entry copies
// to the device first (dr_audit_upload: without -rdc every translation unit has its own copy).
#ifdef HYBRID_DR_PRECISION_AUDIT
#ifdef HYBRID_CUDA_EMU
inline unsigned dr_audit_mask;  // (one variable for every translation unit)
#else
static __device__ unsigned dr_audit_mask;
#endif
extern unsigned dr_audit_mask_host;
extern "C" void cuda_delta_precision_audit_mask(unsigned mask);  // sets dr_audit_mask_host
__device__ __forceinline__ float dr_lo(DrSplitOperand op, float rem) { return (dr_audit_mask >> op) & 1u ? 0.f : rem; }
static inline void dr_audit_upload(void) {
#ifdef HYBRID_CUDA_EMU
    dr_audit_mask = dr_audit_mask_host;
#else
    CUDA_CHECK(cudaMemcpyToSymbolAsync(dr_audit_mask, &dr_audit_mask_host, sizeof(unsigned), 0,
                                       cudaMemcpyHostToDevice, g_cuda.stream));
#endif
}
#else
__device__ __forceinline__ float dr_lo(DrSplitOperand, float rem) { return rem; }
static inline void dr_audit_upload(void) {}
#endif

// x as a bf16 pair hi + lo (hi = bf16(x), lo = bf16(x - hi)): products of split operands,
// hi*hi + hi*lo + lo*hi on three MMAs, carry about 16 bits of mantissa instead of 8; op: the
// operand split (dr_lo)
__device__ __forceinline__ void dr_split(DrSplitOperand op, float x, bf16 *hi, bf16 *lo) {
    const bf16 h = __float2bfloat16(x);
    *hi = h;
    *lo = __float2bfloat16(dr_lo(op, x - __bfloat162float(h)));
}
// dr_exp_note. An entry written `in ? x * expf(a - b) : 0` compiled to a branch around each
// exponential (BSSY, BRA, BSYNC, its two constants loaded again: about 15 instructions where
// expf itself is 8; the SASS of the prep and grad1 on sm_90, session 18). The kernels compute
// such exponentials unconditionally, of operands read whether the entry is in range or not
// (inside the tile: no access out of bounds), and select afterwards: the same bits where in
// range; out of range the value, whatever it is (an inf or a NaN of a row never filled
// included: a GPU does not trap), is dropped by the select. Where an exponential's only
// use is the selected product, the compiler sinks it back into a branch: dr_eval pins it.
// dr_eval(x): x, evaluated at this point on every path (an empty volatile asm that takes and
// gives x, which the compiler may neither drop nor move into a branch; no instruction)
__device__ __forceinline__ float dr_eval(float x) {
#ifndef HYBRID_CUDA_EMU
    asm volatile("" : "+f"(x));
#endif
    return x;
}
// dr_exp(x): act.cuh
// dr_split of two adjacent entries x0, x1 as two bf16x2 words (hi, lo; x0 in the lower half).
// The hi pair is rounded by one paired conversion and read back from it: the same
// round-to-nearest-even as two single conversions, so the same bits, and one conversion
// instruction less a pair (two single ones compiled to F2F each, then a pack).
__device__ __forceinline__ void dr_split_pair(DrSplitOperand op, float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = pack_bf16(x0, x1);
    const float2 h = bf16x2_to_float2(hi);
    lo = pack_bf16(dr_lo(op, x0 - h.x), dr_lo(op, x1 - h.y));
}
__device__ __forceinline__ void dr_mma3(float c[4], const uint32_t ah[4], const uint32_t al[4], const uint32_t bh[2],
                                        const uint32_t bl[2]) {
    mma16816(c, al, bh[0], bh[1]);
    mma16816(c, ah, bl[0], bl[1]);
    mma16816(c, ah, bh[0], bh[1]);
}
// a product of an A kept as one bf16 and a split B: a bl + a bh (dr_mma3's terms and order, less
// al bh)
__device__ __forceinline__ void dr_mma2(float c[4], const uint32_t a[4], const uint32_t bh[2], const uint32_t bl[2]) {
    mma16816(c, a, bl[0], bl[1]);
    mma16816(c, a, bh[0], bh[1]);
}

// ---- the arithmetic of a run: split pairs (LO) or one bf16 MMA a product -----------------
// The forward's kernels (prep, walk, output) take a template flag LO. LO = true is the split
// arithmetic above (HYBRID_DR_BF16=0; the single reference gradient kernel has only it, grad2 only
// one MMA). LO = false is fla's, the default since session 27: every operand is its hi part
// alone, one bf16, and every product one MMA; no lo part is computed,
// stored or loaded, and the walk's and output kernel's lo tiles are not in shared memory
// (docs/delta-rule.md, "One MMA a product"). Its states carry bf16-level errors (hT ~2e-3
// relative at T 4096 on the H200, the precision audit's "all 21" row) where the split
// arithmetic holds 1e-4. Chosen by DrWsMma::lo (LO = false, one MMA, unless HYBRID_DR_BF16=0;
// read by the forward and the backward entries); the backward's reverse walk and grad1 take the
// same flag.
// dr_mma3x / dr_mma2x: dr_mma3 / dr_mma2 where LO, else the one MMA of the hi parts.
// (the host side: chunk_fwd.cu's dr_arith_lo gives DrWsMma::lo for a call)
int dr_arith_lo(void);
// One MMA a product computes the prep's 16 x 16 diagonal blocks of Aqk and L on tensor cores too,
// factored about the block's middle row m: (x_r e^(Gamma_r - Gamma_m)) . (k_c e^(Gamma_m -
// Gamma_c)), where every exponent of the block is within DR_DIAG_BOUND nats of 0 (8 tokens of
// gates averaging up to 5 nats a token); a block with a larger one is computed in fp32 SIMT as
// in the split arithmetic (chunk_prep_mma.cu, step 2; docs/delta-rule.md, "Diagonal blocks on
// tensor cores"). At 40 an operand stays within e^(+-40) of its input, inside bf16's normal range
// (e^(+-87)) with room for |x| far from 1. The host's bound for a call: dr_diag_mma_bound
// (chunk_fwd.cu; -1 under HYBRID_DR_DIAG_SIMT=1, every block in SIMT).
#define DR_DIAG_BOUND 40.f
float dr_diag_mma_bound(void);
template <bool LO>
__device__ __forceinline__ void dr_mma3x(float c[4], const uint32_t ah[4], const uint32_t al[4], const uint32_t bh[2],
                                         const uint32_t bl[2]) {
    if constexpr (LO) dr_mma3(c, ah, al, bh, bl);
    else mma16816(c, ah, bh[0], bh[1]);
}
template <bool LO>
__device__ __forceinline__ void dr_mma2x(float c[4], const uint32_t a[4], const uint32_t bh[2], const uint32_t bl[2]) {
    if constexpr (LO) dr_mma2(c, a, bh, bl);
    else mma16816(c, a, bh[0], bh[1]);
}

// rows_p x cols_p (cols_p a multiple of 8) bf16 tile into shared memory (row stride lds) from
// global src (row stride ldg): entries with row >= nrows or col >= ncols zero. 16-byte
// cp.async where src rows are 16-byte aligned, else plain loads (complete at once); the caller
// commits, waits and syncs.
__device__ __forceinline__ void dr_load_tile(bf16 *s, int lds, const bf16 *src, size_t ldg, int rows_p, int cols_p,
                                             int nrows, int ncols, int tid, int nthreads) {
    const int c8 = cols_p / 8;
    const bool vec = (ldg % 8 == 0) && (((uintptr_t)src & 15) == 0);
    for (int e = tid; e < rows_p * c8; e += nthreads) {
        const int r = e / c8, c = (e % c8) * 8;
        bf16 *d = s + (size_t)r * lds + c;
        const bool in = r < nrows && c < ncols;
        if (vec && (!in || c + 8 <= ncols)) {
            cp_async16(d, in ? src + (size_t)r * ldg + c : src, in);
        } else {
            for (int u = 0; u < 8; u++)
                d[u] = (in && c + u < ncols) ? src[(size_t)r * ldg + c + u] : __float2bfloat16(0.f);
        }
    }
}

// The Delta pair layout. Delta (ws.U once the walk has run) and dDelta (ws.dD) as their
// dr_split pairs, the same 4 bytes an element (ws.dsplit; HYBRID_DR_DELTA_F32=1 keeps them
// fp32, split by each reader):
// row r of a (chunk, head) block is 2V bf16 where the fp32 row was V floats; the columns go by
// groups of 8, group g (width w = min(8, V - 8g)) at 16g: its w hi parts, then its w lo parts.
// A group covers the bytes of its own 8 fp32 columns, so the walk overwrites U with Delta in
// place with no other V tile's columns touched, and a reader takes hi and lo tiles with two
// 16-byte cp.async a group (bit for bit what dr_split of the fp32 value gave). The walks write
// it from their shared hi and lo tiles (walk.cuh).
//
// The hi and lo tiles [64][cols_p] (row stride lds) of columns j0.. (j0 a multiple of 8) of a
// split block P: rows >= nrows and columns >= V zero (as dr_split of the zero the fp32 readers
// substituted). 16-byte cp.async where the group is full and rows are 16-byte aligned (V % 4 ==
// 0), else plain copies; the caller commits, waits and syncs. !LO: the hi tile alone (one MMA
// a product, dr_mma3x; Xl untouched).
template <int COLS, int NTHREADS, bool LO = true>
__device__ __forceinline__ void dr_load_split_tile(bf16 *Xh, bf16 *Xl, int lds, const bf16 *P, int V, int j0,
                                                   int nrows, int tid) {
    constexpr int c8 = COLS / 8;
    static_assert(DR_BT * c8 % NTHREADS == 0, "whole passes");
    const bool vec = V % 4 == 0 && ((uintptr_t)P & 15) == 0;
#pragma unroll
    for (int u8 = 0; u8 < DR_BT * c8 / NTHREADS; u8++) {
        const int e = tid + u8 * NTHREADS, r = e / c8, c = (e % c8) * 8, j = j0 + c;
        bf16 *dh = Xh + (size_t)r * lds + c, *dl = Xl + (size_t)r * lds + c;
        const bool in = r < nrows && j < V;
        const bf16 *src = P + (size_t)r * 2 * V + 2 * j;
        if (vec && (!in || j + 8 <= V)) {
            cp_async16(dh, in ? src : P, in);
            if constexpr (LO) cp_async16(dl, in ? src + 8 : P, in);
        } else {
            const int w = V - j < 8 ? V - j : 8;
            for (int u = 0; u < 8; u++) {
                const bool ok = in && u < w;
                dh[u] = ok ? src[u] : __float2bfloat16(0.f);
                if constexpr (LO) dl[u] = ok ? src[w + u] : __float2bfloat16(0.f);
            }
        }
    }
}

// Workspace of the tensor-core forward (per (slot, head) blocks). The MMA operands are kept
// as bf16 pairs hi + lo (dr_split; *l arrays), the rest fp32:
//   Qg, Qgl [64][K]  q ⊙ exp(Gamma)                 (the output kernel's A operand)
//   Ke, Kel [64][K]  k ⊙ exp(Gamma_end - Gamma)     (the walk's h update, A^T)
//   W, Wl   [64][K]  T diag(beta) (k ⊙ exp(Gamma))  (the walk's Delta, A)
//   U       [64][V]  T diag(beta) V, fp32           (the walk reads it and overwrites it with
//                                                    Delta = U - W h[n] for the output kernel,
//                                                    as hi + lo pairs: dr_load_split_tile)
//   Aqk, Aqkl [64][64] scale q_r.(k_c ⊙ exp(Gamma_r - Gamma_c)), c <= r, 0 above
//   h       [K][V]   h[n] (its hi part only: the output kernel's B operand, one bf16; o's
//                    error grows from 1.9e-3 to 2.1e-3 on the emulated cases, all of it
//                    the bf16 rounding of o itself at first)
//   ge      [K]      exp(Gamma_end), fp32
// Bytes per (chunk, head): 768 K + 2 K V + 256 V + 4 K + 16384; K = V = 128: 176.5 KiB (the
// SIMT layout's forward: 288 KiB).
// backward only (after the above):
//   hl       [K][V]   h[n]'s lo part (the gradient kernel's products keep fp32 accuracy)
//   T        [64][64] T = (I + L)^-1, fp32 (the prep writes it when the array is bound)
//   dh, dhl  [K][V]   dL/dh[n+1], the state gradient leaving the chunk
//   dD       [64][V]  the complete dDelta, hi + lo pairs (dr_load_split_tile; fp32 under
//                     HYBRID_DR_DELTA_F32=1)
//   dQ, dK, dG [64][K]  the gradient kernels' fp32 accumulators (in the spent Qg + Qgl, Ke +
//                    Kel, W + Wl; the aliases: dr_ws_mma_bind)
//   dW      [64][K]  dL/dW, bf16: grad1 writes it in stage 3 and reads it back in stage 5 as
//                    an operand of one bf16 (dW Kb^T, T^T dW), so rounding it at the store
//                    instead of at the load gives the same bits in half the bytes (fp32 until
//                    session 17)
//   dA, dL  [64][64] grad1's dA and dL (the triangular-inverse gradient) for grad2, fp32 (dA in
//                    the spent Aqk + Aqkl, dL in T once grad1 has read it)
//   db [64], gend [K]  grad1's partial dbeta and dGamma_end extras for grad2, fp32
// Backward bytes per (chunk, head): the forward's + 132 K + 6 K V + 256 V + 16640; K = V = 128:
// 337.25 KiB (481.25 before five arrays moved into spent ones, session 15, and 353.25 before
// dW became bf16, session 17; SIMT: 512 KiB; about 2.7 GiB at B8 T4096 H16). What fp32-level states cost: every operand of the state
// chain is stored as hi + lo (4 bytes), where fla stores bf16 (h, w, u, v_new) and holds a
// bf16-level state error (~3e-3 relative). Ways down, not taken yet: Qg recomputed from q and a
// cumsum of g in the output kernel and the reverse walk; the gradient accumulators kept in the
// grad kernel (registers and shared memory of a restructured kernel).
struct DrWsMma {
    bf16 *Qg, *Qgl, *Ke, *Kel, *W, *Wl, *Aqk, *Aqkl, *h, *hl;
    float *U, *ge;
    float *T;
    bf16 *dh, *dhl;
    float *dD, *dQ, *dK, *dG;
    bf16 *dW;
    float *dA, *dL, *db, *gend;
    int dsplit;  // Delta (U after the walk) and dD stored as dr_split pairs (dr_load_split_tile)
    int lo;      // 1: the split arithmetic (every bind); 0: one MMA a product (dr_mma3x above:
                 // the lo arrays are neither written nor read, the Delta / dDelta pairs carry
                 // their hi halves only)
};
static inline size_t dr_ws_mma_bind(DrWsMma *w, void *base, int backward, size_t slots_heads, int K, int V) {
    const size_t C = DR_BT, ck = C * K * 2, cc = C * C * 2, kv = (size_t)K * V * 2;
    const size_t sizes[24] = {ck, ck, ck, ck, ck, ck, cc, cc, kv, C * V * 4, (size_t)K * 4,
                              kv, C * C * 4, kv, kv, C * V * 4, 2 * ck, 2 * ck, 2 * ck, ck,
                              C * C * 4, C * C * 4, C * 4, (size_t)K * 4};
    void **ptrs[24] = {(void **)&w->Qg, (void **)&w->Qgl, (void **)&w->Ke, (void **)&w->Kel, (void **)&w->W,
                       (void **)&w->Wl, (void **)&w->Aqk, (void **)&w->Aqkl, (void **)&w->h, (void **)&w->U,
                       (void **)&w->ge, (void **)&w->hl, (void **)&w->T, (void **)&w->dh, (void **)&w->dhl,
                       (void **)&w->dD, (void **)&w->dQ, (void **)&w->dK, (void **)&w->dG, (void **)&w->dW,
                       (void **)&w->dA, (void **)&w->dL, (void **)&w->db, (void **)&w->gend};
    // Arrays of the backward that live in spent ones (alias[a]: the array whose space a takes):
    // - dQ, dK, dG and dA in the forward's pairs Qg + Qgl, Ke + Kel, W + Wl, Aqk + Aqkl: the
    //   reverse walk is the last kernel that reads those (the gradient kernels take q, k, T,
    //   Delta, h and dh), and each pair spans 2 x its (256-rounded) array, at least the fp32
    //   array's bytes;
    // - dL in T (the same size): grad1 copies its block's T into shared memory (stage 7) before it
    //   writes its dL, and nothing reads T after grad1 (grad2 takes dA and dL; the single
    //   reference kernel reads T and writes no dL).
    // -128 KiB a (chunk, head) at K = V = 128. By index of ptrs: dQ 16 -> Qg 0, dK 17 -> Ke 2,
    // dG 18 -> W 4, dA 20 -> Aqk 6, dL 21 -> T 12.
    const int alias[24] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                           -1, -1, -1, -1, 0,  2,  4,  -1, 6,  12, -1, -1};
    w->dsplit = !env_flag("HYBRID_DR_DELTA_F32");  // 1: Delta, dDelta fp32 (the previous layout)
    w->lo = 1;
    const int count = backward ? 24 : 11;
    size_t off = 0;
    for (int a = 0; a < 24; a++) {
        if (a < count && alias[a] >= 0) {
            *ptrs[a] = *ptrs[alias[a]];
            continue;
        }
        *ptrs[a] = (base && a < count) ? (void *)((char *)base + off) : NULL;
        if (a < count) off += (sizes[a] * slots_heads + 255) & ~(size_t)255;
    }
    return off;
}
// the tensor-core prep (chunk_prep_mma.cu) over the slots x H (chunk slot, head) blocks: the
// workspace's forward arrays (and T where bound), for dr_forward_mma
void dr_prep_launch(const DrWsMma *ws, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta,
                    int gate, float scale, size_t slots, int T, int H, int K, int V, const int *offsets, int N);
// the tensor-core forward (chunk_fwd_mma.cu): o (bf16) and hT (fp32, may be NULL)
// (o NULL: the states only, into ws, for the backward's recompute)
void dr_forward_mma(int gate, bf16 *o, float *hT, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                    const bf16 *beta, const float *h0, float scale, int B, int T, int H, int K, int V,
                    const int *offsets, int N, const DrWsMma *ws);
// the tensor-core backward's kernels after that recompute (cuda_delta_chunk_backward,
// chunk_bwd_mma.cu, runs them in this order): the reverse walk (chunk_bwalk_mma.cu; dH',
// dDelta into ws, dh0 fp32, may be NULL), then the gradients over the slots x H (chunk slot,
// head) blocks, by the grad1 / grad2 pair (chunk_grad1_mma.cu, then chunk_grad2_mma.cu) or the
// single reference kernel (chunk_grad_ref_mma.cu, HYBRID_DR_GRAD_REF=1)
void dr_bwalk_launch(const DrWsMma *ws, float *dh0, const float *dhT, const bf16 *dout, float scale, int T, int H,
                     int K, int V, const int *offsets, int N);
void dr_grad1_launch(const DrWsMma *ws, size_t slots, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                     const bf16 *v, const bf16 *g, const bf16 *beta, int gate, float scale, int T, int H, int K, int V,
                     const int *offsets, int N);
void dr_grad2_launch(const DrWsMma *ws, size_t slots, bf16 *dq, bf16 *dk, bf16 *dg, bf16 *dbeta, const bf16 *q,
                     const bf16 *k, const bf16 *g, const bf16 *beta, int gate, int T, int H, int K, const int *offsets,
                     int N);
void dr_grad_ref_launch(const DrWsMma *ws, size_t slots, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dg, bf16 *dbeta,
                        const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                        const bf16 *beta, int gate, float scale, int T, int H, int K, int V, const int *offsets,
                        int N);

// The SIMT fp32 path on bf16 I/O (the previous kernels, kept as the reference and fallback):
// test entries, the table's members' arguments; their workspace (the fp32 layout DrWs, larger
// than the tensor-core one) is cuda_delta_chunk_workspace_simt bytes. Falling back to SIMT is
// one line a member in chunk_fwd.cu / chunk_bwd_mma.cu (call the _simt entry) plus the size.
extern "C" size_t cuda_delta_chunk_workspace_simt(LinearKind kind, int backward, int B, int T, int H, int K, int V,
                                                  int nseq, int chunk);
extern "C" void cuda_delta_chunk_forward_simt(LinearKind kind, real *o, real *hT, const real *q, const real *k,
                                              const real *v, const real *g, const real *beta, const real *h0,
                                              real scale, int B, int T, int H, int K, int V, const int *offsets,
                                              int nseq, int chunk, void *workspace);
extern "C" void cuda_delta_chunk_backward_simt(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                                               real *dh0, const real *dout, const real *dhT, const real *q,
                                               const real *k, const real *v, const real *g, const real *beta,
                                               const real *h0, real scale, int B, int T, int H, int K, int V,
                                               const int *offsets, int nseq, int chunk, void *workspace);

#endif
