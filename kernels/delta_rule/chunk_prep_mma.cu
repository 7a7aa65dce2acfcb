// The prep kernel of the tensor-core chunkwise forward of KDA / GDN / DeltaNet: per (chunk slot,
// head), everything the walk and the output kernel need from one chunk (Gamma, q e^Gamma,
// k e^(Gamma_end - Gamma), Aqk and L, T = (I + L)^-1, W and U), on tensor cores where it pays
// and in fp32 SIMT for the diagonal blocks and the triangular inverse. The forward's other
// kernels (walk, output) and its host entry, dr_forward_mma, are in chunk_fwd_mma.cu, which
// launches this one through dr_prep_launch; the backward runs it again (chunk_bwd_mma.cu).
// docs/delta-rule.md, "CUDA kernels"; the workspace layout (DrWsMma): chunk.cuh.
#include "kernels/delta_rule/chunk.cuh"

// ---- prep: one block per (chunk slot, head) ---------------------------------------------
// Every input row is read from global memory once: k (and KDA's g) arrive in shared memory by
// 16-byte cp.async, v by cp.async during step 3, q by 16-byte loads into registers one row
// block ahead of its use; the SIMT passes work on 8 consecutive channels a thread (16-byte
// shared-memory accesses, 16-byte workspace stores). The exponentials (about 6.5 an element)
// are the same expressions of the same fp32 operands as in the scalar version before
// (32d9b1a), so where both take expf (the CPU emulator: chunk.cuh's dr_exp) the outputs are
// bit-identical to its, except for the diagonal blocks of Aqk and L (step 2: products of
// per-token factors, other sums); on the GPU they take dr_exp's ex2.approx.
// Every exponential is computed whether its entry is in range or not, then selected (chunk.cuh's
// dr_exp_note; here G is finite everywhere: rows past n hold Gamma_end, channels past K zero).
// 0. cp.async k, g; beta and GDN's per-head gate; L = 0, Aqk's blocks above the diagonal = 0;
//    q of row block 0 into registers.
// 1. Gamma, a thread per channel down the 64 rows in shared memory (fp32, the scalar version's
//    summation order: the same rounding); exp(Gamma_end) to the workspace.
// 2. Aqk and L by row blocks I of 16: below the diagonal block, with the reference Gamma_ref =
//    Gamma at row 16I, the A operand is q (resp. k) ⊙ exp(Gamma_r - Gamma_ref) and the B operand
//    k_c ⊙ exp(Gamma_ref - Gamma_c) for c < 16I (both exponents <= 0); the diagonal block,
//    where a factor would hold up to 15 tokens of growth and overflow with a strong gate, in
//    fp32 SIMT, the decay exp(Gamma_r - Gamma_c) a running product of the per-token factors
//    exp(Gamma_t - Gamma_{t-1}) (every exponent a gate; dr_prep_diag_block;
//    docs/delta-rule.md, "Stable decay exponents"). The A and B operands below the diagonal
//    blocks are split hi + lo (three MMAs a k-step) for KDA only (per-channel gates, split_lo):
//    GDN's and DeltaNet's are one bf16 (one MMA; DeltaNet's are q and k, exact in bf16), whose lo
//    parts change neither kind's states (docs/delta-rule.md, "Fewer MMAs: the audit's droppable
//    operands"), while without them KDA's states pass the parity test's 1e-4 at K <= 32. The
//    pass that fills block I's A operands also
//    writes its rows of Qg and Ke to the workspace (the same q and k in registers), and its q
//    rows and those 15 x K factors to shared memory for the diagonal block. The B tile holds
//    two column blocks J < I, so block row I takes max(1, ceil(I / 2)) passes (5 in all, 96 B
//    rows); warp u of a pass computes one 16x8 half of a 16x16 tile (Aqk or L) over K.
// 3. T = (I + L)^-1, fp32 SIMT, blockwise in place over L: the four 16x16 diagonal blocks by
//    forward substitution (a warp each, 15 warp-synchronous rows), then block rows I = 1..3:
//    T_IJ = -T_II sum_{J<=M<I} L_IM T_MJ (two barriers a block row instead of one a row).
// 4. W = T diag(beta) (k e^Gamma), U = T diag(beta) v: A = T diag(beta) split hi + lo, built
//    in registers from the fp32 T; B = k e^Gamma (hi + lo; hi over k in place) and v (exact in
//    bf16).
// Shared memory (K, V padded: KP, VP; LK = KP + 8, LV = VP + 8): G fp32 [64][KP] (drp_gsw) | L, then T,
// fp32 [64][DRP_LT] | beta, GDN gate fp32 [64] each | k bf16 [64][LK] (step 4: k e^Gamma hi) |
// tiles bf16: step 1 g [64][LK]; step 2 A of q and of k, hi + lo, 16 rows each, and B hi + lo,
// 32 rows each, and the 16 q rows of the diagonal block (144 x LK), then its decay factors fp32
// [15][KP]; steps 3-4 v [64][LV], then k e^Gamma lo [64][LK] (step 3's fp32 scratch X there).
// K = V = 128: 112.25 KiB, 2 blocks an SM (at most 113 KiB each).
// One MMA a product (!LO; chunk.cuh, dr_mma3x): every split above is its hi part alone, one MMA
// a product, no lo store (the same layout), except step 2's diagonal blocks: on tensor cores too
// (docs/delta-rule.md, "Diagonal blocks on tensor cores"), factored about the block's middle row
// m = 16I + 8, (x_r e^(Gamma_r - Gamma_m)) . (k_c e^(Gamma_m - Gamma_c)), every exponent of the
// block within DR_DIAG_BOUND nats of 0 (chunk.cuh), so no factor overflows; the entries above the
// diagonal (both factors > 1) may be inf and are dropped by a select. Those products are three
// MMAs (hi + lo, in the lo tiles and the SIMT diagonal's q rows and factors: Dqh .. Dcl): with one
// bf16 a factor, o's error against the double reference rose 10-25% over the SIMT blocks'
// (emulated); with three it is theirs. A block with a larger exponent (a gate past ~5 nats a
// token on average over 8 tokens; the fill's test, one __syncthreads_or) runs the SIMT
// dr_prep_diag_block as the split arithmetic does; HYBRID_DR_DIAG_SIMT=1 sends every block there.
#define DRP_BROWS 32  // rows of step 2's B tile (two column blocks)
// Row stride of L and T in shared memory (fp32): 68, not 64. With 64 (a multiple of the 32
// banks) every access of one column in two rows was a bank conflict: the block rows of step 3
// read L[r][p] (then T[r][m]) in rows r, r + 1 of a warp (2-way), step 2's L stores and step 4's
// fragment loads of T touch 8 rows of 4 lanes each (4-way as 8-byte accesses). At 68, rows r and
// r + 1 fall 4 banks apart: step 3's loads are conflict-free, the 8-byte accesses 2-way.
#define DRP_LT 68

static size_t prep_mma_smem(int K, int V) {
    const size_t KP = dr_pad16(K), VP = dr_pad16(V), LK = KP + DR_PAD, LV = VP + DR_PAD;
    const size_t s2 = (5 * 16 + 2 * DRP_BROWS) * LK + 2 * 15 * KP, s4 = DR_BT * (LK + LV), tiles = s2 > s4 ? s2 : s4;
    return DR_BT * KP * 4 + DR_BT * DRP_LT * 4 + 2 * DR_BT * 4 + DR_BT * LK * 2 + tiles * 2;
}

// dr_split of 8 entries of operand op into 16-byte words hi, lo
__device__ __forceinline__ void drp_split8(DrSplitOperand op, const float x[8], uint4 *hi, uint4 *lo) {
    dr_split_pair(op, x[0], x[1], hi->x, lo->x);
    dr_split_pair(op, x[2], x[3], hi->y, lo->y);
    dr_split_pair(op, x[4], x[5], hi->z, lo->z);
    dr_split_pair(op, x[6], x[7], hi->w, lo->w);
}
// Gamma's rows in shared memory (G, fp32 [64][KP]) hold channel i at i ^ drp_gsw(i): the two
// 4-channel halves of every 8-channel group whose channels have bit 5 set are swapped. A thread
// reads its 8 channels i0.. as two 16-byte loads 32 bytes apart; with lanes on consecutive
// groups, the 8 lanes of a quarter-warp (one shared-memory wavefront of 16-byte accesses) then
// covered only 4 of the 8 16-byte bank slots, a 2-way conflict on every load (Nsight Compute:
// 22% of the prep's shared-load wavefronts were conflicts). drp_lds8g reads the stored-first
// half first: lanes 0-3 of a quarter the even slots, 4-7 the odd ones. Same values: the outputs
// keep their bits.
__device__ __forceinline__ int drp_gsw(int i) { return (i >> 3) & 4; }
// 8 fp32 channels i0.. (i0 % 8 == 0) of a G row
__device__ __forceinline__ void drp_lds8g(const float *row, int i0, float f[8]) {
    const int s = drp_gsw(i0);
    const float4 a = *reinterpret_cast<const float4 *>(row + i0 + s), b = *reinterpret_cast<const float4 *>(row + i0 + (s ^ 4));
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
// the 8 entries i0.. of a global bf16 row as bf16 bits, zero past ncols (in == false: all zero);
// one 16-byte load where vec (row 16-byte aligned) and the group is whole
__device__ __forceinline__ uint4 drp_ldg8(const bf16 *row, int i0, int ncols, bool in, bool vec) {
    uint4 u;
    u.x = u.y = u.z = u.w = 0u;
    if (!in) return u;
    if (vec && i0 + 8 <= ncols) return *reinterpret_cast<const uint4 *>(row + i0);
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = i0 + j < ncols ? __bfloat162float(row[i0 + j]) : 0.f;
    u.x = pack_bf16(f[0], f[1]), u.y = pack_bf16(f[2], f[3]), u.z = pack_bf16(f[4], f[5]), u.w = pack_bf16(f[6], f[7]);
    return u;
}
// 8 entries hi + lo of operand op to a workspace row at p (entries i0.., ncols valid): 16-byte
// stores where vec. !LO: the hi parts alone (the same bf16 values), nothing at pl.
template <bool LO>
__device__ __forceinline__ void drp_stg8(DrSplitOperand op, bf16 *ph, bf16 *pl, const float x[8], int i0, int ncols,
                                         bool vec) {
    if (vec && i0 + 8 <= ncols) {
        if constexpr (LO) {
            uint4 hi, lo;
            drp_split8(op, x, &hi, &lo);
            *reinterpret_cast<uint4 *>(ph + i0) = hi;
            *reinterpret_cast<uint4 *>(pl + i0) = lo;
        } else {
            store8(ph + i0, x);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i0 + j < ncols) {
                if constexpr (LO) dr_split(op, x[j], ph + i0 + j, pl + i0 + j);
                else ph[i0 + j] = __float2bfloat16(x[j]);
            }
    }
}

// 4 fp32 from shared memory (16-byte aligned)
__device__ __forceinline__ void drp_lds4f(const float *p, float f[4]) {
    const float4 a = *reinterpret_cast<const float4 *>(p);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
}
// 4 bf16 of shared memory (8-byte aligned) as fp32
__device__ __forceinline__ void drp_lds4(const bf16 *p, float f[4]) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = bf16x2_to_float2(u.x), b = bf16x2_to_float2(u.y);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

// The start of a column c of the diagonal block, 4 channels: kd = k_c, q_c . k_c into sd
__device__ __forceinline__ void drp_diag_col(float kd[4], float &sd, const bf16 *kc, const bf16 *qc) {
    float qf[4];
    drp_lds4(kc, kd);
    drp_lds4(qc, qf);
#pragma unroll
    for (int t = 0; t < 4; t++) sd += qf[t] * kd[t];
}
// A row r of the diagonal block's running product, 4 channels: kd = k_c ⊙ exp(Gamma_{r-1} -
// Gamma_c) times dec = exp(Gamma_r - Gamma_{r-1}); q_r . kd into sq, k_r . kd into sk
__device__ __forceinline__ void drp_diag_row(float kd[4], float &sq, float &sk, const float *dec, const bf16 *qr,
                                             const bf16 *kr) {
    float a[4], qf[4], kf[4];
    drp_lds4f(dec, a);
    drp_lds4(qr, qf);
    drp_lds4(kr, kf);
#pragma unroll
    for (int t = 0; t < 4; t++) {
        kd[t] *= a[t];
        sq += qf[t] * kd[t];
        sk += kf[t] * kd[t];
    }
}

// Step 2's diagonal block I of Aqk and L, in fp32 SIMT: for 16I <= c <= r < 16I + 16,
//   Aqk[r][c] = scale sum_i q_r[i] k_c[i] exp(Gamma_r[i] - Gamma_c[i]),
//   L[r][c]   = beta_r sum_i k_r[i] k_c[i] exp(Gamma_r[i] - Gamma_c[i])   (c < r),
// never through a factor exp(Gamma_ref - Gamma_c) with c past the reference row: that one
// overflows once the gate passes ~6 nats a token (KDA's softplus gate is unbounded), and inf
// times an underflowed 0 is NaN; docs/delta-rule.md, "Stable decay exponents". Instead the decay
// is a running product down the rows of the per-token factors Dec[t] = exp(Gamma_{t+1} -
// Gamma_t) (local rows t; every exponent a gate, <= 0): k_c ⊙ exp(Gamma_r - Gamma_c) for r =
// c, c + 1, .. costs a multiply a channel and row, and the 15 x K exponentials of the block
// are shared (Dec, filled by the caller) instead of one a pair and channel (136 x K).
// Warp w owns the columns c0 = w (rows c0..15) and c1 = 15 - w (rows c1..15): 17 rows either
// way; lane l the channels 4l..4l+3 (+ 128 j). Each lane sums its channels into 32 slots, one
// warp reduce-scatter (31 shuffles) leaves slot l's total on lane l: slot s < 16 an Aqk entry,
// 16 + s the L entry of the same pair; s = 0 (and 16 for Aqk) the diagonal of c0 (c1), s > w
// the row s of column c0, 1 <= s <= w the row c1 + s of column c1. Writes the whole 16 x 16
// block of Aqk (hi + lo; 0 above the diagonal and past n) and L's entries c < r < n (L is 0
// elsewhere already). qd: the block's 16 q rows; Dec: [15][KP]. !LO: Aqk's hi parts only.
template <bool LO>
__device__ __forceinline__ void dr_prep_diag_block(bf16 *Aqk, bf16 *Aqkl, float *L, const bf16 *qd, const bf16 *ks,
                                                   const float *Dec, const float *bs, float scale, int I, int n,
                                                   int KP, int LK) {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, C = DR_BT, o = 16 * I, c0 = w, c1 = 15 - w;
    {  // the entries no pair computes: above the diagonal, and the rows past n
        const int rr = tid / 16, cc = tid % 16, r = o + rr, c = o + cc;
        if (cc > rr || r >= n) {
            Aqk[r * C + c] = __float2bfloat16(0.f);
            if constexpr (LO) Aqkl[r * C + c] = __float2bfloat16(0.f);
        }
    }
    float v[32];
#pragma unroll
    for (int s = 0; s < 32; s++) v[s] = 0.f;
    for (int i = 4 * lane; i < KP; i += 128) {
        float kd[4];
        // column c0: its diagonal into slot 0, row r > c0 into slot r
        drp_diag_col(kd, v[0], ks + (o + c0) * LK + i, qd + c0 * LK + i);
#pragma unroll
        for (int r = 1; r < 16; r++)
            if (r > c0)
                drp_diag_row(kd, v[r], v[16 + r], Dec + (r - 1) * KP + i, qd + r * LK + i, ks + (o + r) * LK + i);
        // column c1: its diagonal into slot 16, row c1 + s (1 <= s <= w) into slot s
        drp_diag_col(kd, v[16], ks + (o + c1) * LK + i, qd + c1 * LK + i);
#pragma unroll
        for (int s = 1; s < 8; s++)
            if (s <= w) {
                const int r = c1 + s;
                drp_diag_row(kd, v[s], v[16 + s], Dec + (r - 1) * KP + i, qd + r * LK + i, ks + (o + r) * LK + i);
            }
    }
    dr_rs_step<16>(v, lane);
    dr_rs_step<8>(v, lane);
    dr_rs_step<4>(v, lane);
    dr_rs_step<2>(v, lane);
    dr_rs_step<1>(v, lane);
    const int s = lane & 15, isL = lane >= 16 && s > 0;
    const int c = s == 0 ? (lane ? c1 : c0) : (s > w ? c0 : c1), r = o + (s == 0 ? c : s > w ? s : c1 + s);
    if (r < n) {
        if (isL) L[r * DRP_LT + o + c] = bs[r] * v[0];
        else if constexpr (LO) dr_split(DRS_AQK, scale * v[0], Aqk + r * C + o + c, Aqkl + r * C + o + c);
        else Aqk[r * C + o + c] = __float2bfloat16(scale * v[0]);
    }
}

// Step 2's product of a 16-row A tile (rows of Ah, stride LK) and 8 B rows (Brow: this lane's row
// of them) over ks16 k-steps of 16, one MMA a k-step: one ldmatrix.x4 gives B of two k-steps (an
// odd last one: matrices 2, 3 unused)
__device__ __forceinline__ void drp_tile_1mma(float acc[4], const bf16 *Ah, const bf16 *Brow, int LK, int ks16,
                                              int lane) {
    const int m = lane >> 3;
    for (int kk = 0; kk < ks16; kk += 2) {
        uint32_t ah[4], bb[4];
        ldsm_x4(bb, Brow + kk * 16 + 8 * (kk + 1 < ks16 ? m : m & 1));
        dr_lda(ah, Ah, LK, 0, kk * 16, lane);
        mma16816(acc, ah, bb[0], bb[1]);
        if (kk + 1 < ks16) {
            dr_lda(ah, Ah, LK, 0, (kk + 1) * 16, lane);
            mma16816(acc, ah, bb[2], bb[3]);
        }
    }
}
// The same in three MMAs a k-step (hi hi + hi lo + lo hi: chunk.cuh, dr_mma3): A hi, lo tiles Ah,
// Al; Bp this lane's address of the ldmatrix.x4 that gives B's hi (matrices 0, 1) and lo (2, 3)
// of a k-step
__device__ __forceinline__ void drp_tile_3mma(float acc[4], const bf16 *Ah, const bf16 *Al, const bf16 *Bp, int LK,
                                              int ks16, int lane) {
    for (int kk = 0; kk < ks16; kk++) {
        uint32_t ah[4], al[4], bb[4];
        dr_lda(ah, Ah, LK, 0, kk * 16, lane);
        dr_lda(al, Al, LK, 0, kk * 16, lane);
        ldsm_x4(bb, Bp + kk * 16);
        dr_mma3(acc, ah, al, bb, bb + 2);
    }
}
// Step 2's 16x8 result (an MMA accumulator) of row block I, column block J, half nh to L (isL:
// beta_r times it, strictly below the diagonal) or Aqk (scale times it, on and below the
// diagonal; hi + lo where LO); 0 elsewhere and in the rows past n. A select, not a product,
// drops what is out of range: the diagonal block's entries above its diagonal may be inf or NaN
// on tensor cores (two factors > 1; one MMA a product, below).
template <bool LO>
__device__ __forceinline__ void drp_tile_store(const float acc[4], bf16 *Aqk, bf16 *Aqkl, float *L, const float *bs,
                                               float scale, int isL, int I, int J, int nh, int n, int lane) {
    const int C = DR_BT, LT = DRP_LT, gq = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int u = 0; u < 4; u += 2) {
        const int r = 16 * I + gq + (u >= 2 ? 8 : 0), c = 16 * J + nh * 8 + 2 * t4;
        if (isL) {  // one 8-byte store (rows of 64 fp32: 4-way bank conflict, 8-way as two 4-byte stores)
            *reinterpret_cast<float2 *>(L + r * LT + c) =
                make_float2((c < r && r < n) ? bs[r] * acc[u] : 0.f, (c + 1 < r && r < n) ? bs[r] * acc[u + 1] : 0.f);
        } else {
            const float a0 = (c <= r && r < n) ? scale * acc[u] : 0.f, a1 = (c + 1 <= r && r < n) ? scale * acc[u + 1] : 0.f;
            if constexpr (LO) {
                uint32_t hi, lo;
                dr_split_pair(DRS_AQK, a0, a1, hi, lo);
                *reinterpret_cast<uint32_t *>(Aqk + r * C + c) = hi;
                *reinterpret_cast<uint32_t *>(Aqkl + r * C + c) = lo;
            } else {
                *reinterpret_cast<uint32_t *>(Aqk + r * C + c) = pack_bf16(a0, a1);
            }
        }
    }
}
// The SIMT diagonal block's decay factors Dec[t] = exp(Gamma_{16I+t+1} - Gamma_{16I+t}) (a gate:
// <= 0), t = 0..14, [15][KP]
__device__ __forceinline__ void drp_diag_decay(float *Dec, const float *G, int I, int KP, int tid) {
    for (int e = tid; e < 15 * (KP / 4); e += DRM_THREADS) {
        const int t = e / (KP / 4), i = (e % (KP / 4)) * 4, r = 16 * I + t;
        float g1[4], g0[4];
        drp_lds4f(G + (r + 1) * KP + (i ^ drp_gsw(i)), g1);  // (4 channels stay together)
        drp_lds4f(G + r * KP + (i ^ drp_gsw(i)), g0);
        float4 d;
        d.x = dr_exp(g1[0] - g0[0]), d.y = dr_exp(g1[1] - g0[1]), d.z = dr_exp(g1[2] - g0[2]), d.w = dr_exp(g1[3] - g0[3]);
        *reinterpret_cast<float4 *>(Dec + t * KP + i) = d;
    }
}

// LO: the split arithmetic, else one MMA a product (chunk.cuh, dr_mma3x); KV: 0, or
// DR_KV_FIXED; FULL: whole chunks only (dr_full_chunks; chunk.cuh)
template <bool LO, int KV, bool FULL>
__global__ void __launch_bounds__(DRM_THREADS, 2)  // 2 blocks an SM: at most 128 registers
    dr_prep_mma_kernel(DrWsMma ws, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta,
                       int gate, float scale, int Tlen, int H, int K_arg, int V_arg, const int *offsets, int N,
                       float diag_bound) {
    const int K = KV ? KV : K_arg, V = KV ? KV : V_arg;
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, t4 = lane & 3;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;  // whole block: no chunk here
    static_assert(!FULL || KV, "FULL instances are built for K = V = DR_KV_FIXED only");
    if (FULL) n = DR_BT;
    const int C = DR_BT, KP = dr_pad16(K), VP = dr_pad16(V), LK = KP + DR_PAD, LV = VP + DR_PAD, K8 = KP / 8;
    const size_t sh = (size_t)x * H + h, ldk = (size_t)H * K;
    DYNAMIC_SMEM(float, sm);
    float *G = sm, *L = G + C * KP, *Tm = L, *bs = L + C * DRP_LT, *gh = bs + C;  // T overwrites L
    const int LT = DRP_LT;
    bf16 *ks = (bf16 *)(gh + C), *tiles = ks + C * LK;
    bf16 *gs = tiles;                                                          // step 1 (KDA)
    bf16 *Aqh = tiles, *Aql = Aqh + 16 * LK, *Akh = Aql + 16 * LK, *Akl = Akh + 16 * LK, *Bkh = Akl + 16 * LK,
         *Bkl = Bkh + DRP_BROWS * LK, *qd = Bkl + DRP_BROWS * LK;                // step 2
    float *Dec = (float *)(qd + 16 * LK);                                       // step 2
    // step 2, one MMA a product: the diagonal block's operands hi + lo, where the lo tiles and
    // the SIMT diagonal's q rows and factors were (Dcl = Dch + 16 rows; Dkl in Dec's 7.5 KiB)
    bf16 *Dqh = Aql, *Dkh = Akl, *Dch = Bkl, *Dcl = Bkl + 16 * LK, *Dql = qd, *Dkl = (bf16 *)Dec;
    bf16 *vb = tiles, *kwh = ks, *kwl = vb + C * LV;                           // steps 3-4
    float *X = (float *)kwl;                                                   // step 3
    bf16 *Qg = ws.Qg + sh * C * K, *Qgl = ws.Qgl + sh * C * K, *Ke = ws.Ke + sh * C * K, *Kel = ws.Kel + sh * C * K,
         *Wg = ws.W + sh * C * K, *Wgl = ws.Wl + sh * C * K, *Aqk = ws.Aqk + sh * C * C, *Aqkl = ws.Aqkl + sh * C * C;
    float *Ug = ws.U + sh * C * V;
    const bf16 *qc = q + ((size_t)tok0 * H + h) * K, *kc = k + ((size_t)tok0 * H + h) * K;
    // 16-byte global access: q's rows, the workspace rows of Qg and Ke
    // step 2's operands below the diagonal blocks hi + lo (KDA) or one bf16 (GDN, DeltaNet)
    const bool split_lo = LO && gate == DRG_CHANNEL;
    const bool qvec = K % 8 == 0 && ((uintptr_t)qc & 15) == 0,
               wvec = K % 8 == 0 && (((uintptr_t)Qg | (uintptr_t)Qgl | (uintptr_t)Ke | (uintptr_t)Kel) & 15) == 0;

    // 0. k and g by cp.async; beta, the GDN gate; L = 0, Aqk's blocks above the diagonal
    dr_load_tile(ks, LK, kc, ldk, C, KP, n, K, tid, DRM_THREADS);
    if (gate == DRG_CHANNEL) dr_load_tile(gs, LK, g + ((size_t)tok0 * H + h) * K, ldk, C, KP, n, K, tid, DRM_THREADS);
    cp_async_commit();
    // q of this thread's groups of row block I: entry j is group tid + 256 j of the 16 x K8
    // (row, 8-channel group) pairs; loaded one row block ahead
    uint4 qv[2];
    auto load_q = [&](int I) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int e = tid + j * DRM_THREADS, r = 16 * I + e / K8;
            qv[j] = drp_ldg8(qc + (size_t)r * ldk, (e % K8) * 8, K, e < 16 * K8 && r < n, qvec);
        }
    };
    load_q(0);
    for (int r = tid; r < C; r += DRM_THREADS) {
        bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
        gh[r] = gate == DRG_HEAD && r < n ? dr_ld(g + (size_t)(tok0 + r) * H + h) : 0.f;
    }
    for (int e = tid; e < C * LT / 4; e += DRM_THREADS) reinterpret_cast<float4 *>(L)[e] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int e = tid; e < C * C / 8; e += DRM_THREADS) {
        const int r = e / 8, c = (e % 8) * 8;
        if (c / 16 > r / 16) {
            uint4 z;
            z.x = z.y = z.z = z.w = 0u;
            *reinterpret_cast<uint4 *>(Aqk + r * C + c) = z;
            if constexpr (LO) *reinterpret_cast<uint4 *>(Aqkl + r * C + c) = z;
        }
    }
    cp_async_wait<0>();
    __syncthreads();

    // 1. Gamma (rows >= n and channels >= K add zeros: G there is Gamma_end, resp. 0)
    for (int i = tid; i < KP; i += DRM_THREADS) {
        float acc = 0.f;
#pragma unroll 8
        for (int r = 0; r < C; r++) {
            if (gate == DRG_CHANNEL) acc += __bfloat162float(gs[r * LK + i]);
            else if (gate == DRG_HEAD && i < K) acc += gh[r];
            G[r * KP + (i ^ drp_gsw(i))] = acc;
        }
        if (i < K) ws.ge[sh * K + i] = dr_exp(acc);
    }
    __syncthreads();

    // 2. Aqk and L: row block I, column blocks J0, J0 + 1 a pass
    for (int I = 0; I < 4; I++)
        for (int J0 = 0; J0 == 0 || J0 < I; J0 += 2) {
            const int nB = min(2, I - J0);  // column blocks J0.. < I of this pass (0: block 0, its diagonal only)
            // (!LO) an operand of the diagonal block's factored form out of [e^-bound, e^bound]
            // somewhere in the block: the block in SIMT (diag_simt, the same for every thread)
            bool diag_far = !(diag_bound >= 0.f), diag_simt = false;
            if (J0 == 0) {  // block I's A operands; its rows of Qg and Ke
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int e = tid + j * DRM_THREADS;
                    if (e >= 16 * K8) break;
                    const int rr = e / K8, i0 = (e % K8) * 8, r = 16 * I + rr;
                    float qf[8], kf[8], gr[8], g0[8], ge[8], a[8], b[8], qg[8], ke[8];
                    unpack8(qv[j], qf);
                    if constexpr (LO) *reinterpret_cast<uint4 *>(qd + rr * LK + i0) = qv[j];  // q itself, for the diagonal block
                    load8(ks + r * LK + i0, kf);
                    drp_lds8g(G + r * KP, i0, gr);
                    drp_lds8g(G + 16 * I * KP, i0, g0);
                    drp_lds8g(G + (C - 1) * KP, i0, ge);
#pragma unroll
                    for (int t = 0; t < 8; t++) {  // (exponentials first, then the selects: dr_exp_note)
                        const bool in = r < n && i0 + t < K;
                        const float ex = dr_exp(gr[t] - g0[t]), eq = dr_exp(gr[t]), ek = dr_exp(ge[t] - gr[t]);
                        a[t] = in ? qf[t] * ex : 0.f;
                        b[t] = in ? kf[t] * ex : 0.f;
                        qg[t] = in ? qf[t] * eq : 0.f;
                        ke[t] = in ? kf[t] * ek : 0.f;
                    }
                    if (split_lo) {
                        uint4 hi, lo;
                        drp_split8(DRS_QR, a, &hi, &lo);
                        *reinterpret_cast<uint4 *>(Aqh + rr * LK + i0) = hi;
                        *reinterpret_cast<uint4 *>(Aql + rr * LK + i0) = lo;
                        drp_split8(DRS_KR, b, &hi, &lo);
                        *reinterpret_cast<uint4 *>(Akh + rr * LK + i0) = hi;
                        *reinterpret_cast<uint4 *>(Akl + rr * LK + i0) = lo;
                    } else {
                        store8(Aqh + rr * LK + i0, a);  // (one bf16: drp_split8's hi alone)
                        store8(Akh + rr * LK + i0, b);
                    }
                    if (r < n) {
                        drp_stg8<LO>(DRS_QG, Qg + (size_t)r * K, Qgl + (size_t)r * K, qg, i0, K, wvec);
                        drp_stg8<LO>(DRS_KE, Ke + (size_t)r * K, Kel + (size_t)r * K, ke, i0, K, wvec);
                    }
                    if constexpr (!LO) {  // the diagonal block's operands, about its middle row m = 16I + 8
                        float gm[8], dq[8], dk[8], dc[8];
                        drp_lds8g(G + (16 * I + 8) * KP, i0, gm);
#pragma unroll
                        for (int t = 0; t < 8; t++) {
                            const bool in = r < n && i0 + t < K;
                            const float d = gr[t] - gm[t], up = dr_exp(d), dn = dr_exp(-d);
                            diag_far |= in && !(fabsf(d) <= diag_bound);
                            dq[t] = in ? qf[t] * up : 0.f;
                            dk[t] = in ? kf[t] * up : 0.f;
                            dc[t] = in ? kf[t] * dn : 0.f;
                        }
                        uint4 hi, lo;  // hi + lo (three MMAs: below) in the tiles one MMA a product leaves free
                        drp_split8(DRS_QR, dq, &hi, &lo);
                        *reinterpret_cast<uint4 *>(Dqh + rr * LK + i0) = hi;
                        *reinterpret_cast<uint4 *>(Dql + rr * LK + i0) = lo;
                        drp_split8(DRS_KR, dk, &hi, &lo);
                        *reinterpret_cast<uint4 *>(Dkh + rr * LK + i0) = hi;
                        *reinterpret_cast<uint4 *>(Dkl + rr * LK + i0) = lo;
                        drp_split8(DRS_KC, dc, &hi, &lo);
                        *reinterpret_cast<uint4 *>(Dch + rr * LK + i0) = hi;
                        *reinterpret_cast<uint4 *>(Dcl + rr * LK + i0) = lo;
                    }
                }
                if (I < 3) load_q(I + 1);  // in flight through this block row's passes
                if constexpr (LO) drp_diag_decay(Dec, G, I, KP, tid);
            }
            // B rows c = 16 J0 .. 16 (J0 + nB) - 1: k_c ⊙ exp(Gamma_ref - Gamma_c)
            for (int e = tid; e < 16 * nB * K8; e += DRM_THREADS) {
                const int cc = e / K8, i0 = (e % K8) * 8, c = 16 * J0 + cc;
                float kf[8], gc[8], g0[8], b[8];
                load8(ks + c * LK + i0, kf);
                drp_lds8g(G + c * KP, i0, gc);
                drp_lds8g(G + 16 * I * KP, i0, g0);
#pragma unroll
                for (int t = 0; t < 8; t++) {
                    const float e = dr_eval(dr_exp(g0[t] - gc[t]));
                    b[t] = c < n && i0 + t < K ? kf[t] * e : 0.f;
                }
                if (split_lo) {
                    uint4 hi, lo;
                    drp_split8(DRS_KC, b, &hi, &lo);
                    *reinterpret_cast<uint4 *>(Bkh + cc * LK + i0) = hi;
                    *reinterpret_cast<uint4 *>(Bkl + cc * LK + i0) = lo;
                } else {
                    store8(Bkh + cc * LK + i0, b);
                }
            }
            if constexpr (LO) __syncthreads();
            else if (J0 == 0) diag_simt = __syncthreads_or(diag_far);  // any operand too far from 1: SIMT
            else __syncthreads();
            if (warp < 4 * nB) {
                // tile (Aqk or L, J) and its 8-column half nh
                const int tile = warp >> 1, nh = warp & 1, isL = tile & 1, J = J0 + (tile >> 1);
                const bf16 *Ah = isL ? Akh : Aqh, *Al = isL ? Akl : Aql;
                const int m = lane >> 3, ks16 = KP / 16;
                const bf16 *Brow = Bkh + (size_t)(16 * (J - J0) + 8 * nh + (lane & 7)) * LK;
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
                if (split_lo) {  // one ldmatrix.x4 gives B's hi and lo of a k-step; three MMAs
                    drp_tile_3mma(acc, Ah, Al, (m < 2 ? Brow : Brow + (Bkl - Bkh)) + 8 * (m & 1), LK, ks16, lane);
                } else {
                    drp_tile_1mma(acc, Ah, Brow, LK, ks16, lane);
                }
                drp_tile_store<LO>(acc, Aqk, Aqkl, L, bs, scale, isL, I, J, nh, n, lane);
            }
            if constexpr (!LO) {
                // the diagonal block on tensor cores (unless diag_simt): tile (Aqk or L, 8-column
                // half nh) d = 0..3 on warp (4 nB + d) % 8, after its tile below the diagonal if any
                const int d = (warp - 4 * nB) & 7;
                if (J0 == 0 && !diag_simt && d < 4) {
                    const int isL = d >> 1, nh = d & 1;
                    float acc[4] = {0.f, 0.f, 0.f, 0.f};
                    const bf16 *Ah = isL ? Dkh : Dqh, *Al = isL ? Dkl : Dql;
                    // one ldmatrix.x4 gives B's hi and lo of a k-step (Dcl is Dch + 16 rows)
                    const bf16 *Bp = Dch + (size_t)(8 * nh + (lane & 7) + 16 * ((lane >> 3) >> 1)) * LK + 8 * ((lane >> 3) & 1);
                    drp_tile_3mma(acc, Ah, Al, Bp, LK, KP / 16, lane);
                    drp_tile_store<false>(acc, Aqk, Aqkl, L, bs, scale, isL, I, I, nh, n, lane);
                }
            }
            if (J0 == 0) {
                if constexpr (LO) dr_prep_diag_block<LO>(Aqk, Aqkl, L, qd, ks, Dec, bs, scale, I, n, KP, LK);
                else if (diag_simt) {  // block I's q rows (over Dql) and its decay factors (over Dkl)
                    for (int e = tid; e < 16 * K8; e += DRM_THREADS) {
                        const int rr = e / K8, i0 = (e % K8) * 8, r = 16 * I + rr;
                        *reinterpret_cast<uint4 *>(qd + rr * LK + i0) = drp_ldg8(qc + (size_t)r * ldk, i0, K, r < n, qvec);
                    }
                    drp_diag_decay(Dec, G, I, KP, tid);
                    __syncthreads();
                    dr_prep_diag_block<LO>(Aqk, Aqkl, L, qd, ks, Dec, bs, scale, I, n, KP, LK);
                }
            }
            __syncthreads();  // A, B are refilled
        }
    // v by cp.async, in flight through step 3 (vb does not overlap L, T or X)
    dr_load_tile(vb, LV, v + ((size_t)tok0 * H + h) * V, (size_t)H * V, C, VP, n, V, tid, DRM_THREADS);
    cp_async_commit();

    // 3. T = (I + L)^-1 in place (docs/delta-rule.md, "Triangular inverse by forward
    // substitution"), L strictly lower, T unit lower (the unit diagonal implicit until the end).
    // Diagonal blocks: T[r][c] = -L[r][c] - sum_{c<m<r} L[r][m] T[m][c] within the block, row by
    // row; each lane computes first, then the row is written (it reads L's row r).
    // Every inner loop below runs a trip count that is the same for all lanes of a warp and known
    // at compile time, its loads unconditional (inside the [64][LT] array), and a term outside
    // the sum (m <= c, p <= cc) computed and then dropped by a select: the same fused
    // multiply-adds in the same order as the loops that started at c + 1 (resp. cc + 1), so the
    // same bits, but loads the compiler can issue ahead of the dependent chain. The lane-dependent
    // bounds before made every iteration wait on its own shared-memory loads (Nsight Compute's
    // source view, session 13: these three loops were 16% of the prep's warp samples).
    if (warp < 4) {
        const int o = 16 * warp, c = lane & 15;
#pragma unroll
        for (int rr = 1; rr < 16; rr++) {
            const int r = o + rr;
            float acc = c < rr ? -L[r * LT + o + c] : 0.f;
#pragma unroll
            for (int m = 1; m < rr; m++) {
                const float t = fmaf(-L[r * LT + o + m], Tm[(o + m) * LT + o + c], acc);
                acc = m > c ? t : acc;
            }
            __syncwarp();
            if (c < rr && lane < 16) Tm[r * LT + o + c] = acc;
            __syncwarp();
        }
    }
    __syncthreads();
    // Block rows: X_J = sum_{J<=M<I} L_IM T_MJ (into X), then
    // T_IJ = -T_II X_J = -(X_J + sum_{m<rr} T_II[rr][m] X_J[m]) over L_IJ.
#pragma unroll
    for (int I = 1; I < 4; I++) {
        for (int e = tid; e < I * 256; e += DRM_THREADS) {
            const int J = e / 256, rr = (e % 256) / 16, c = e % 16, r = 16 * I + rr, cc = 16 * J + c;
            float acc = L[r * LT + cc];  // M = J: L_IJ T_JJ, T_JJ's unit diagonal
            // p = cc + 1 .. 16 I - 1: block J from column c + 1 (selected), then blocks J + 1 .. I - 1
#pragma unroll
            for (int q = 1; q < 16; q++) {
                const int p = 16 * J + q;
                const float t = fmaf(L[r * LT + p], Tm[p * LT + cc], acc);
                acc = q > c ? t : acc;
            }
            for (int M = J + 1; M < I; M++)
#pragma unroll
                for (int q = 0; q < 16; q++) {
                    const int p = 16 * M + q;
                    acc = fmaf(L[r * LT + p], Tm[p * LT + cc], acc);
                }
            X[e] = acc;
        }
        __syncthreads();
        for (int e = tid; e < I * 256; e += DRM_THREADS) {
            const int J = e / 256, rr = (e % 256) / 16, c = e % 16, r = 16 * I + rr;
            float acc = X[e];
#pragma unroll
            for (int m = 0; m < 15; m++) {
                const float t = fmaf(Tm[r * LT + 16 * I + m], X[J * 256 + m * 16 + c], acc);
                acc = m < rr ? t : acc;
            }
            Tm[r * LT + 16 * J + c] = -acc;
        }
        __syncthreads();
    }
    // 4. T's unit diagonal and zero upper part (T to the workspace for the backward); the B tiles
    // k e^Gamma (hi over k, lo over X: each thread rewrites only the k it read) and v
    for (int e = tid; e < C * C / 4; e += DRM_THREADS) {
        const int r = (4 * e) / C, c0 = (4 * e) % C;
        float4 &tr = *reinterpret_cast<float4 *>(Tm + r * LT + c0), t = tr;
        if (c0 >= r) t.x = c0 == r ? 1.f : 0.f;
        if (c0 + 1 >= r) t.y = c0 + 1 == r ? 1.f : 0.f;
        if (c0 + 2 >= r) t.z = c0 + 2 == r ? 1.f : 0.f;
        if (c0 + 3 >= r) t.w = c0 + 3 == r ? 1.f : 0.f;
        tr = t;
        if (ws.T) reinterpret_cast<float4 *>(ws.T + sh * C * C)[e] = t;
    }
    for (int e = tid; e < C * K8; e += DRM_THREADS) {
        const int c = e / K8, i0 = (e % K8) * 8;
        float kf[8], gc[8], w[8];
        load8(ks + c * LK + i0, kf);
        drp_lds8g(G + c * KP, i0, gc);
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const float e = dr_eval(dr_exp(gc[t]));
            w[t] = c < n && i0 + t < K ? kf[t] * e : 0.f;
        }
        if constexpr (LO) {
            uint4 hi, lo;
            drp_split8(DRS_KB, w, &hi, &lo);
            *reinterpret_cast<uint4 *>(kwh + c * LK + i0) = hi;
            *reinterpret_cast<uint4 *>(kwl + c * LK + i0) = lo;
        } else {
            store8(kwh + c * LK + i0, w);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    {
        // warp: m-tile mt (rows 16 mt..), 16-column pairs p = warp / 4, + 2, ... of W then U;
        // T is lower triangular: k-steps kk <= mt only
        const int mt = warp & 3;
        uint32_t ah[4][4], al[4][4];  // A = T diag(beta), fragments by hand (kernels/mma.cuh's layout)
        for (int kk = 0; kk <= mt; kk++)
            for (int u = 0; u < 4; u++) {
                const int r = mt * 16 + gq + (u & 1) * 8, c = kk * 16 + 2 * t4 + (u >> 1) * 8;
                const float2 t = *reinterpret_cast<const float2 *>(Tm + r * LT + c);  // (8 bytes: 2-way conflicts, DRP_LT)
                if constexpr (LO) dr_split_pair(DRS_TB, t.x * bs[c], t.y * bs[c + 1], ah[kk][u], al[kk][u]);
                else ah[kk][u] = pack_bf16(t.x * bs[c], t.y * bs[c + 1]);
            }
        const int npk = KP / 16, npv = VP / 16;
        // U: pairs of adjacent columns as one 8-byte store where aligned (the 4 lanes of a row fill
        // a 32-byte sector). W hi, lo go through shared memory, a [16][16] bf16 tile each a warp in
        // T's place (1 KiB a warp; T is in registers now, hence the barrier): a lane's 4-byte
        // fragment stores used 16 of 32 bytes a sector, two 16-byte stores of a row fill one. In
        // the tile, row rr's two 16-byte chunks are swapped where rr & 4 (the fragment stores and
        // the row reads both conflict-free).
        const bool wvec16 = K % 8 == 0 && ((((uintptr_t)Wg | (uintptr_t)Wgl) & 15) == 0),
                   upair = V % 2 == 0 && ((uintptr_t)Ug & 7) == 0;
        bf16 *Wst = reinterpret_cast<bf16 *>(Tm) + warp * 512;  // hi [16][16], then lo
        __syncthreads();
        for (int p = warp >> 2; p < npk + npv; p += 2) {
            const bool isU = p >= npk;
            const int n0 = (isU ? p - npk : p) * 16, ld = isU ? LV : LK;
            float acc[2][4] = {};
            for (int kk = 0; kk <= mt; kk++) {
                uint32_t bh[4], bl[4];
                if (isU) {  // v exact: hi and lo of T only
                    dr_ldb_kn(bh, vb, ld, kk * 16, n0, lane);
                    if constexpr (LO) {
                        mma16816(acc[0], al[kk], bh[0], bh[1]);
                        mma16816(acc[1], al[kk], bh[2], bh[3]);
                    }
                    mma16816(acc[0], ah[kk], bh[0], bh[1]);
                    mma16816(acc[1], ah[kk], bh[2], bh[3]);
                } else {
                    dr_ldb_kn(bh, kwh, ld, kk * 16, n0, lane);
                    if constexpr (LO) dr_ldb_kn(bl, kwl, ld, kk * 16, n0, lane);
                    dr_mma3x<LO>(acc[0], ah[kk], al[kk], bh, bl);
                    dr_mma3x<LO>(acc[1], ah[kk], al[kk], bh + 2, bl + 2);
                }
            }
            if (isU) {
                for (int nt = 0; nt < 2; nt++)
                    for (int u = 0; u < 4; u += 2) {
                        const int r = mt * 16 + gq + (u >= 2 ? 8 : 0), c = n0 + nt * 8 + 2 * t4;
                        if (r >= n || c >= V) continue;
                        const float a0 = acc[nt][u], a1 = acc[nt][u + 1];
                        float *d = Ug + (size_t)r * V + c;
                        if (upair && c + 1 < V) *reinterpret_cast<float2 *>(d) = make_float2(a0, a1);
                        else {
                            d[0] = a0;
                            if (c + 1 < V) d[1] = a1;
                        }
                    }
                continue;
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int u = 0; u < 4; u += 2) {
                    const int rr = gq + (u >= 2 ? 8 : 0), sc = ((nt ^ (rr >> 2)) & 1) * 8 + 2 * t4;
                    if constexpr (LO) {
                        uint32_t hi, lo;
                        dr_split_pair(DRS_W, acc[nt][u], acc[nt][u + 1], hi, lo);
                        *reinterpret_cast<uint32_t *>(Wst + rr * 16 + sc) = hi;
                        *reinterpret_cast<uint32_t *>(Wst + 256 + rr * 16 + sc) = lo;
                    } else {
                        *reinterpret_cast<uint32_t *>(Wst + rr * 16 + sc) = pack_bf16(acc[nt][u], acc[nt][u + 1]);
                    }
                }
            __syncwarp();
#pragma unroll
            for (int m = 0; m < (LO ? 2 : 1); m++) {  // hi, then lo: 16 rows x 2 chunks, a 32-byte sector a row
                const int rr = lane >> 1, ch = lane & 1, r = mt * 16 + rr, c = n0 + ch * 8;
                if (r < n && c < K) {
                    const bf16 *sp = Wst + m * 256 + rr * 16 + ((ch ^ (rr >> 2)) & 1) * 8;
                    bf16 *d = (m ? Wgl : Wg) + (size_t)r * K + c;
                    if (wvec16 && c + 8 <= K) *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(sp);
                    else
                        for (int j = 0; j < 8 && c + j < K; j++) d[j] = sp[j];
                }
            }
            __syncwarp();  // the tile is rewritten by the next pair
        }
    }
}

// the prep over the slots x H (chunk slot, head) blocks (the precision audit's mask uploaded
// first: this translation unit's copy, chunk.cuh)
void dr_prep_launch(const DrWsMma *ws, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta,
                    int gate, float scale, size_t slots, int T, int H, int K, int V, const int *offsets, int N) {
    dr_audit_upload();
    const float diag_bound = dr_diag_mma_bound();  // (read in either arithmetic: a bad value stops the run)
    const bool kv128 = dr_kv_fixed(K, V), full = kv128 && dr_full_chunks(offsets, T);
    launch_kernel(ws->lo ? (full    ? dr_prep_mma_kernel<true, DR_KV_FIXED, true>
                            : kv128 ? dr_prep_mma_kernel<true, DR_KV_FIXED, false>
                                    : dr_prep_mma_kernel<true, 0, false>)
                         : (full    ? dr_prep_mma_kernel<false, DR_KV_FIXED, true>
                            : kv128 ? dr_prep_mma_kernel<false, DR_KV_FIXED, false>
                                    : dr_prep_mma_kernel<false, 0, false>),
                  dim3((unsigned)slots, H),
                  dim3(DRM_THREADS), prep_mma_smem(K, V), *ws, q, k, v, g, beta, gate, scale, T, H, K, V, offsets, N,
                  ws->lo ? 0.f : diag_bound);
}
