// Chunkwise forward of KDA / GDN / DeltaNet on CUDA (docs/delta-rule.md, "Per-chunk
// quantities", "Stable decay exponents", "Triangular inverse by forward substitution",
// "Exactness of the chunk form: the WY representation", "The chunkwise forward algorithm").
// The decomposition, the chunk slots and the workspace layout: kernels/delta_rule/chunk.cuh.
// The arithmetic mirrors the CPU chunk form step by step, in fp32.
#include <stdio.h>
#include <string.h>

#include "kernels/delta_rule/chunk.cuh"
#include "kernels/delta_rule/workspace.cuh"

// ---- prep: one block per (chunk slot, head) ---------------------------------------------
// Gamma, Qg, Ke (one thread per channel), Aqk and L (K tiled through shared memory, every
// thread owning DR_BT*DR_BT/DR_THREADS (r, c) entries), T = (I+L)^-1 by forward substitution
// in shared memory, then W and U.
// Shared memory: L, Tm [64][64]; q, k, Gamma tiles [64][DR_BK]; beta [64].
static const size_t PREP_SMEM = (2 * DR_BT * DR_BT + 3 * DR_BT * DR_BK + DR_BT) * sizeof(float);

template <typename T>
__global__ void __launch_bounds__(DR_THREADS)
    dr_prep_kernel(DrWs ws, const T *q, const T *k, const T *v, const T *g, const T *beta, int gate, float scale,
                   int Tlen, int H, int K, int V, const int *offsets, int N) {
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;  // whole block: no chunk here
    const int C = DR_BT;
    const size_t sh = (size_t)x * H + h;
    float *G = ws.G + sh * C * K, *Qg = ws.Qg + sh * C * K, *Ke = ws.Ke + sh * C * K, *W = ws.W + sh * C * K;
    float *Aqk = ws.Aqk + sh * C * C, *Tg = ws.Tm + sh * C * C, *U = ws.U + sh * C * V;
    DYNAMIC_SMEM(float, sm);
    float *L = sm, *Tm = L + C * C, *qs = Tm + C * C, *ks = qs + C * DR_BK, *gs = ks + C * DR_BK,
          *bs = gs + C * DR_BK;
#define QK_ROW(r) (((size_t)(tok0 + (r)) * H + h) * K)
#define V_ROW(r) (((size_t)(tok0 + (r)) * H + h) * V)

    for (int r = tid; r < C; r += DR_THREADS) bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
    // Gamma_r = sum_{j<=r} g_j (inclusive, per chunk); Qg = q e^Gamma; Ke = k e^(Gamma_end - Gamma):
    // every exponent <= 0 since g <= 0 (docs/delta-rule.md, "Stable decay exponents")
    for (int i = tid; i < K; i += DR_THREADS) {
        float acc = 0.f;
        for (int r = 0; r < n; r++) {
            acc += dr_gate(g, gate, (size_t)(tok0 + r), h, i, H, K);
            G[r * K + i] = acc;
        }
        for (int r = 0; r < n; r++) {
            const float gr = G[r * K + i];
            Qg[r * K + i] = dr_ld(q + QK_ROW(r) + i) * expf(gr);
            Ke[r * K + i] = dr_ld(k + QK_ROW(r) + i) * expf(acc - gr);
        }
    }
    __syncthreads();  // G visible to the block

    // Aqk[r][c] = scale q_r.(k_c e^(Gamma_r - Gamma_c)), c <= r; L[r][c] = beta_r k_r.(...), c < r.
    // The decay is evaluated only for c <= r (masked before exponentiating).
    constexpr int PER = DR_BT * DR_BT / DR_THREADS;
    float aq[PER], ak[PER];
#pragma unroll
    for (int m = 0; m < PER; m++) aq[m] = ak[m] = 0.f;
    for (int i0 = 0; i0 < K; i0 += DR_BK) {
        for (int e = tid; e < C * DR_BK; e += DR_THREADS) {
            const int r = e / DR_BK, i = i0 + e % DR_BK;
            const bool ok = r < n && i < K;
            qs[e] = ok ? dr_ld(q + QK_ROW(r) + i) : 0.f;
            ks[e] = ok ? dr_ld(k + QK_ROW(r) + i) : 0.f;
            gs[e] = ok ? G[r * K + i] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < PER; m++) {
            const int e = tid + m * DR_THREADS, r = e / C, c = e % C;
            if (c > r || r >= n) continue;
            float a = 0.f, b = 0.f;
            for (int ii = 0; ii < DR_BK; ii++) {
                const float ex = expf(gs[r * DR_BK + ii] - gs[c * DR_BK + ii]), kc = ks[c * DR_BK + ii] * ex;
                a += qs[r * DR_BK + ii] * kc;
                b += ks[r * DR_BK + ii] * kc;
            }
            aq[m] += a;
            ak[m] += b;
        }
        __syncthreads();  // the tiles are reloaded
    }
#pragma unroll
    for (int m = 0; m < PER; m++) {
        const int e = tid + m * DR_THREADS, r = e / C, c = e % C;
        Aqk[e] = (c <= r && r < n) ? scale * aq[m] : 0.f;
        L[e] = (c < r && r < n) ? bs[r] * ak[m] : 0.f;
        Tm[e] = r == c ? 1.f : 0.f;
    }
    __syncthreads();

    // T = (I + L)^-1 (docs/delta-rule.md, "Triangular inverse by forward substitution"):
    // T[r][c] = -sum_{m=c}^{r-1} L[r][m] T[m][c], row r from the finished rows above it
    for (int r = 1; r < n; r++) {
        for (int c = tid; c < r; c += DR_THREADS) {
            float acc = 0.f;
            for (int m = c; m < r; m++) acc += L[r * C + m] * Tm[m * C + c];
            Tm[r * C + c] = -acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < C * C; e += DR_THREADS) Tg[e] = Tm[e];

    // W = T diag(beta) (k e^Gamma),  U = T diag(beta) V  (docs/delta-rule.md, "Exactness of the
    // chunk form: the WY representation")
    for (int e = tid; e < n * K; e += DR_THREADS) {
        const int r = e / K, i = e % K;
        float acc = 0.f;
        for (int c = 0; c <= r; c++) acc += Tm[r * C + c] * bs[c] * dr_ld(k + QK_ROW(c) + i) * expf(G[c * K + i]);
        W[r * K + i] = acc;
    }
    for (int e = tid; e < n * V; e += DR_THREADS) {
        const int r = e / V, j = e % V;
        float acc = 0.f;
        for (int c = 0; c <= r; c++) acc += Tm[r * C + c] * bs[c] * dr_ld(v + V_ROW(c) + j);
        U[r * V + j] = acc;
    }
#undef QK_ROW
#undef V_ROW
}

// ---- walk: one block per (sequence, head, V-tile), the chunks in order ----------------
// State tile hs [K][DR_BV] in shared memory (fp32): per chunk, h[n] is saved, then
// Delta = U - W h[n] (saved), then h[n+1] = diag(e^Gamma_end) h[n] + Ke^T Delta.
// Shared memory: hs [K][DR_BV], Ds [64][DR_BV], e^Gamma_end [K].
static size_t walk_smem(int K) { return ((size_t)K * DR_BV + DR_BT * DR_BV + K) * sizeof(float); }

__global__ void __launch_bounds__(DR_THREADS)
    dr_walk_kernel(DrWs ws, float *hT, const float *h0, int Tlen, int H, int K, int V, const int *offsets) {
    const int s = blockIdx.x, h = blockIdx.y, j0 = blockIdx.z * DR_BV, tid = threadIdx.x, C = DR_BT;
    const int bv = V - j0 < DR_BV ? V - j0 : DR_BV;
    DYNAMIC_SMEM(float, sm);
    float *hs = sm, *Ds = hs + K * DR_BV, *ee = Ds + C * DR_BV;
    int bos, len;
    dr_seq_range(offsets, Tlen, s, &bos, &len);
    const int base = dr_seq_base(bos, s), nch = (len + C - 1) / C;
    const size_t task = (size_t)s * H + h;  // (N, H, K, V) states

    for (int e = tid; e < K * DR_BV; e += DR_THREADS) {
        const int i = e / DR_BV, jj = e % DR_BV;
        hs[e] = (jj < bv && h0) ? h0[(task * K + i) * V + j0 + jj] : 0.f;
    }
    __syncthreads();
    for (int ci = 0; ci < nch; ci++) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        float *hg = ws.h + sh * K * V, *D = ws.D + sh * C * V;
        const float *W = ws.W + sh * C * K, *U = ws.U + sh * C * V, *Ke = ws.Ke + sh * C * K,
                    *G = ws.G + sh * C * K;
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            hg[(size_t)i * V + j0 + jj] = hs[i * DR_BV + jj];
        }
        for (int e = tid; e < n * bv; e += DR_THREADS) {
            const int r = e / bv, jj = e % bv;
            float acc = U[r * V + j0 + jj];
            for (int i = 0; i < K; i++) acc -= W[r * K + i] * hs[i * DR_BV + jj];
            Ds[r * DR_BV + jj] = acc;
            D[r * V + j0 + jj] = acc;
        }
        for (int i = tid; i < K; i += DR_THREADS) ee[i] = expf(G[(n - 1) * K + i]);
        __syncthreads();
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            float acc = ee[i] * hs[i * DR_BV + jj];
            for (int r = 0; r < n; r++) acc += Ke[r * K + i] * Ds[r * DR_BV + jj];
            hs[i * DR_BV + jj] = acc;
        }
        __syncthreads();
    }
    if (hT)
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            hT[(task * K + i) * V + j0 + jj] = hs[i * DR_BV + jj];
        }
}

// ---- output: one block per (chunk slot, head, V-tile) ------------------------------------
// o_r = scale Qg_r h[n] + sum_{c<=r} Aqk[r][c] Delta_c (docs/delta-rule.md, "Exactness of the
// chunk form: the WY representation")
template <typename T>
__global__ void __launch_bounds__(DR_THREADS)
    dr_output_kernel(DrWs ws, T *o, float scale, int Tlen, int H, int K, int V, const int *offsets, int N) {
    const int x = blockIdx.x, h = blockIdx.y, j0 = blockIdx.z * DR_BV, C = DR_BT;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    const int bv = V - j0 < DR_BV ? V - j0 : DR_BV;
    const size_t sh = (size_t)x * H + h;
    const float *Qg = ws.Qg + sh * C * K, *hg = ws.h + sh * K * V, *Aqk = ws.Aqk + sh * C * C,
                *D = ws.D + sh * C * V;
    for (int e = threadIdx.x; e < n * bv; e += DR_THREADS) {
        const int r = e / bv, j = j0 + e % bv;
        float acc = 0.f;
        for (int i = 0; i < K; i++) acc += Qg[r * K + i] * hg[(size_t)i * V + j];
        acc *= scale;
        for (int c = 0; c <= r; c++) acc += Aqk[r * C + c] * D[c * V + j];
        dr_st(o + ((size_t)(tok0 + r) * H + h) * V + j, acc);
    }
}

// ---- host ----------------------------------------------------------------------------
void dr_check_args(const char *op, LinearKind kind, int B, int T, int H, int K, int V, const int *offsets, int nseq,
                   int chunk) {
    if (kind != LINEAR_KDA && kind != LINEAR_GDN && kind != LINEAR_DELTANET) die("%s: bad kind %d", op, (int)kind);
    if (chunk != DR_BT) die("%s: chunk_size %d: the CUDA delta-rule kernels take %d", op, chunk, DR_BT);
    if (K < 1 || K > DR_MAX_DIM || V < 1 || V > DR_MAX_DIM)
        die("%s: K = %d, V = %d: the CUDA delta-rule kernels take head dims 1..%d", op, K, V, DR_MAX_DIM);
    if (B < 0 || T < 0 || H < 1) die("%s: bad shape B=%d T=%d H=%d", op, B, T, H);
    if (offsets && (B != 1 || nseq < 0)) die("%s: offsets need B == 1 and nseq >= 0 (B=%d nseq=%d)", op, B, nseq);
}

template <typename T>
static void forward_states(int gate, float *hT, const T *q, const T *k, const T *v, const T *g, const T *beta,
                           const float *h0, float scale, int B, int Tlen, int H, int K, int V, const int *offsets,
                           int N, const DrWs *ws) {
    const size_t slots = dr_num_slots(B, Tlen, N);
    if (N == 0) return;
    if (slots > 0)
        launch_kernel(dr_prep_kernel<T>, dim3((unsigned)slots, H), dim3(DR_THREADS), PREP_SMEM, *ws, q, k, v, g, beta,
                      gate, scale, Tlen, H, K, V, offsets, N);
    launch_kernel(dr_walk_kernel, dim3(N, H, (V + DR_BV - 1) / DR_BV), dim3(DR_THREADS), walk_smem(K), *ws, hT, h0,
                  Tlen, H, K, V, offsets);
}

void dr_forward_states(int gate, float *hT, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                       const bf16 *beta, const float *h0, float scale, int B, int T, int H, int K, int V,
                       const int *offsets, int N, const DrWs *ws) {
    forward_states<bf16>(gate, hT, q, k, v, g, beta, h0, scale, B, T, H, K, V, offsets, N, ws);
}

template <typename T>
static void forward(LinearKind kind, T *o, float *hT, const T *q, const T *k, const T *v, const T *g, const T *beta,
                    const float *h0, float scale, int B, int Tlen, int H, int K, int V, const int *offsets, int nseq,
                    int chunk, void *workspace) {
    dr_check_args("delta_chunk_forward", kind, B, Tlen, H, K, V, offsets, nseq, chunk);
    const int N = offsets ? nseq : B;
    const size_t slots = dr_num_slots(B, Tlen, N);
    DrWs ws;
    dr_ws_bind(&ws, workspace, 0, slots * H, K, V);
    forward_states<T>(dr_gate_of(kind), hT, q, k, v, g, beta, h0, scale, B, Tlen, H, K, V, offsets, N, &ws);
    if (N > 0 && slots > 0)
        launch_kernel(dr_output_kernel<T>, dim3((unsigned)slots, H, (V + DR_BV - 1) / DR_BV), dim3(DR_THREADS), 0, ws,
                      o, scale, Tlen, H, K, V, offsets, N);
}

// The arithmetic of a call of the table's forward or backward (chunk.cuh, dr_mma3x;
// docs/delta-rule.md, "One MMA a product"): 0, one bf16 MMA a product, fla's arithmetic (the
// default since session 27: HYBRID_DR_BF16 unset, empty or 1); 1, the split hi + lo products
// (HYBRID_DR_BF16=0), which hold the states to 1e-4 of the double reference where one MMA holds
// them to fla's bf16 bars. Read at each call, so a test can switch; any other value stops the run
// with its name (env_choice); the split arithmetic is announced once on stderr, so that a run's log
// says that it did not train in the default arithmetic.
int dr_arith_lo(void) {
    static const char *const names[] = {"1", "0"};  // (index 1: the split products)
    if (!env_choice("HYBRID_DR_BF16", names, 2)) return 0;
    static int told = 0;
    if (!told) {
        told = 1;
        fprintf(stderr, "hybrid: note: HYBRID_DR_BF16=0: the chunkwise delta rule runs the split hi + lo products, "
                        "not one bf16 MMA a product (the default, fla's arithmetic)\n");
    }
    return 1;
}

// The bound of the one-MMA prep's diagonal blocks on tensor cores (chunk.cuh, DR_DIAG_BOUND;
// docs/delta-rule.md, "Diagonal blocks on tensor cores"), or -1 with HYBRID_DR_DIAG_SIMT=1: every
// diagonal block in fp32 SIMT, as the split arithmetic computes them (tests/check_one_mma.sh
// compares the two arithmetics that way). Read at each call.
float dr_diag_mma_bound(void) {
    return env_flag("HYBRID_DR_DIAG_SIMT") ? -1.f : DR_DIAG_BOUND;
}

// the table's forward: the tensor-core kernels (chunk_fwd_mma.cu)
extern "C" void cuda_delta_chunk_forward(LinearKind kind, real *o, real *hT, const real *q, const real *k,
                                         const real *v, const real *g, const real *beta, const real *h0, real scale,
                                         int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                         void *workspace) {
    PROFILE("delta_chunk_fwd");
    dr_check_args("delta_chunk_forward", kind, B, T, H, K, V, offsets, nseq, chunk);
    const int N = offsets ? nseq : B;
    DrWsMma ws;
    dr_ws_mma_bind(&ws, workspace, 0, dr_num_slots(B, T, N) * H, K, V);
    ws.lo = dr_arith_lo();
    dr_forward_mma(dr_gate_of(kind), (bf16 *)o, (float *)hT, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                   (const bf16 *)g, (const bf16 *)beta, (const float *)h0, scale, B, T, H, K, V, offsets, N, &ws);
}

// the SIMT fp32 forward on bf16 I/O (test entry; the fallback)
extern "C" void cuda_delta_chunk_forward_simt(LinearKind kind, real *o, real *hT, const real *q, const real *k,
                                              const real *v, const real *g, const real *beta, const real *h0,
                                              real scale, int B, int T, int H, int K, int V, const int *offsets,
                                              int nseq, int chunk, void *workspace) {
    PROFILE("delta_chunk_fwd_simt");
    forward<bf16>(kind, (bf16 *)o, (float *)hT, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)g,
                  (const bf16 *)beta, (const float *)h0, scale, B, T, H, K, V, offsets, nseq, chunk, workspace);
}

extern "C" void cuda_delta_chunk_forward_f32io(LinearKind kind, float *o, float *hT, const float *q, const float *k,
                                               const float *v, const float *g, const float *beta, const float *h0,
                                               float scale, int B, int T, int H, int K, int V, const int *offsets,
                                               int nseq, int chunk, void *workspace) {
    PROFILE("delta_chunk_fwd_f32io");
    forward<float>(kind, o, hT, q, k, v, g, beta, h0, scale, B, T, H, K, V, offsets, nseq, chunk, workspace);
}

// Bytes of the forward's (backward 0) or backward's (1) workspace for up to nseq sequences over
// B*T rows (nseq < B is read as B: the fixed-length call has B sequences): the table's members
// take the tensor-core layout (DrWsMma), the SIMT entries their fp32 layout (DrWs; chunk.cuh).
size_t delta_chunk_workspace_bytes(LinearKind kind, int backward, int B, int T, int H, int K, int V, int nseq,
                                   int chunk) {
    dr_check_args("delta-rule workspace", kind, 1, T, H, K, V, NULL, nseq, chunk);
    const int N = nseq > B ? nseq : B;
    DrWsMma ws;
    return dr_ws_mma_bind(&ws, NULL, backward, dr_num_slots(B, T, N) * H, K, V);
}

extern "C" size_t cuda_delta_chunk_workspace_simt(LinearKind kind, int backward, int B, int T, int H, int K, int V,
                                                  int nseq, int chunk) {
    dr_check_args("delta-rule workspace (SIMT)", kind, 1, T, H, K, V, NULL, nseq, chunk);
    const int N = nseq > B ? nseq : B;
    DrWs ws;
    return dr_ws_bind(&ws, NULL, backward, dr_num_slots(B, T, N) * H, K, V);
}
