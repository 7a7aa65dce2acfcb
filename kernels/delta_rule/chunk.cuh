// The chunkwise delta rule on CUDA (KDA, GDN, DeltaNet; docs/delta-rule.md, "Chunkwise
// forward" and "Chunkwise backward"): shared constants, the workspace layout, device helpers
// and the host entry points shared by chunk_fwd.cu and chunk_bwd.cu.
//
// Decomposition (fla's): chunk-local work runs chunk-parallel, one block per (chunk, head);
// only the inter-chunk state recurrence is sequential, one block per (sequence, head, V-tile)
// walking that sequence's chunks in order (V columns of the state are independent):
//   forward   prep   (chunk, head)          Gamma, Qg, Ke, Aqk, T = (I+L)^-1, W, U
//             walk   (seq, head, V-tile)    h[n] saved, Delta = U - W h[n], h[n+1], hT
//             output (chunk, head, V-tile)  o = scale Qg h[n] + Aqk Delta
//   backward  prep + walk again (recompute, docs/delta-rule.md "Recomputation in the backward")
//             bwalk  (seq, head, V-tile)    dH' = dL/dh[n+1] saved, complete dDelta, dh[n], dh0
//             grad   (chunk, head)          stages B1, B3, the triangular inverse, B4, B6
// This first version is SIMT fp32 (no tensor cores); the tile sizes below are the named
// places where MMA tiles go later. Chunk size 64 only.
#ifndef HYBRID_KERNELS_DELTA_RULE_CHUNK_CUH
#define HYBRID_KERNELS_DELTA_RULE_CHUNK_CUH

#include "kernels/common.cuh"

#define DR_BT 64        // chunk size (fla's); the only one these kernels take
#define DR_BK 32        // K tile of the prep kernel's Aqk / L products
#define DR_BV 32        // V tile of the walks and the output kernel
#define DR_THREADS 256  // threads of every chunk kernel (8 warps)
#define DR_MAX_DIM 256  // K and V limit

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

// Finds the chunk of slot x: its sequence s, first row tok0, row count n (1..64), and the
// chunk index within the sequence. Returns 0 if the slot holds no chunk.
__device__ __forceinline__ int dr_locate_chunk(const int *offsets, int T, int N, int x, int *s_out, int *tok0,
                                               int *n) {
    int lo = 0, hi = N - 1;  // largest s with base_s <= x (base_0 = 0 <= x)
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        int bos, len;
        dr_seq_range(offsets, T, mid, &bos, &len);
        if (dr_seq_base(bos, mid) <= x) lo = mid;
        else hi = mid - 1;
    }
    int bos, len;
    dr_seq_range(offsets, T, lo, &bos, &len);
    const int ci = x - dr_seq_base(bos, lo), nch = (len + DR_BT - 1) / DR_BT;
    if (ci >= nch) return 0;
    *s_out = lo;
    *tok0 = bos + ci * DR_BT;
    *n = len - ci * DR_BT < DR_BT ? len - ci * DR_BT : DR_BT;
    return 1;
}

// ---- workspace layout (fp32; per (slot, head) blocks, slot-major, head inside) ----------
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

// fp32-I/O forward (q, k, v, g, beta, o all float; same workspace as the bf16 forward): the
// accuracy check of the kernels' fp32 arithmetic without the bf16 rounding of I/O.
extern "C" void cuda_delta_chunk_forward_f32io(LinearKind kind, float *o, float *hT, const float *q, const float *k,
                                               const float *v, const float *g, const float *beta, const float *h0,
                                               float scale, int B, int T, int H, int K, int V, const int *offsets,
                                               int nseq, int chunk, void *workspace);

#endif
