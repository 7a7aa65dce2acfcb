// Chunkwise forward of KDA / GDN / DeltaNet on tensor cores (bf16 MMA, fp32 accumulation):
// the same decomposition as chunk_fwd.cu (prep, walk, output; kernels/delta_rule/chunk.cuh),
// its products as mma.m16n8k16 through kernels/mma.cuh, the workspace in bf16 (DrWsMma).
// What stays fp32: Gamma, the exponentials, L and the triangular inverse T (SIMT, in shared
// memory), every accumulator, and the state h (registers of the walk; bf16 only as an MMA
// operand and in the workspace copy that the output kernel multiplies by).
#include "kernels/delta_rule/chunk.cuh"
#include "kernels/delta_rule/walk.cuh"

#define DRM_THREADS 256  // prep and walk: 8 warps
#define DRO_THREADS 128  // output: 4 warps, one 16-row m-tile each

// ---- prep: one block per (chunk slot, head) ---------------------------------------------
// Every input row is read from global memory once: k (and KDA's g) arrive in shared memory by
// 16-byte cp.async, v by cp.async during step 3, q by 16-byte loads into registers one row
// block ahead of its use; the SIMT passes work on 8 consecutive channels a thread (16-byte
// shared-memory accesses, 16-byte workspace stores). The exponentials are the same
// expressions of the same fp32 operands as in the scalar version before (32d9b1a; about 6.5
// an element), so the outputs are bit-identical to its (the emulated test cases), except for
// the diagonal blocks of Aqk and L (step 2: products of per-token factors, other sums).
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

// bf16 bits <-> fp32 for the 8-channel groups of the prep (bf16 -> fp32 is exact)
__device__ __forceinline__ void drp_unpack8(const uint4 &u, float f[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 t = __bfloat1622float2(h[j]);
        f[2 * j] = t.x, f[2 * j + 1] = t.y;
    }
}
// dr_split of two adjacent entries of operand op as two bf16x2 words (hi, lo; the lower column first)
__device__ __forceinline__ void drp_split2(DrSplitOperand op, float x0, float x1, uint32_t *hi, uint32_t *lo) {
    const float h0 = __bfloat162float(__float2bfloat16(x0)), h1 = __bfloat162float(__float2bfloat16(x1));
    *hi = pack_bf16(h0, h1);  // (exact: h0, h1 are bf16 values)
    *lo = pack_bf16(dr_lo(op, x0 - h0), dr_lo(op, x1 - h1));
}
// dr_split of 8 entries of operand op into 16-byte words hi, lo
__device__ __forceinline__ void drp_split8(DrSplitOperand op, const float x[8], uint4 *hi, uint4 *lo) {
    drp_split2(op, x[0], x[1], &hi->x, &lo->x);
    drp_split2(op, x[2], x[3], &hi->y, &lo->y);
    drp_split2(op, x[4], x[5], &hi->z, &lo->z);
    drp_split2(op, x[6], x[7], &hi->w, &lo->w);
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
// stores where vec
__device__ __forceinline__ void drp_stg8(DrSplitOperand op, bf16 *ph, bf16 *pl, const float x[8], int i0, int ncols,
                                         bool vec) {
    if (vec && i0 + 8 <= ncols) {
        uint4 hi, lo;
        drp_split8(op, x, &hi, &lo);
        *reinterpret_cast<uint4 *>(ph + i0) = hi;
        *reinterpret_cast<uint4 *>(pl + i0) = lo;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i0 + j < ncols) dr_split(op, x[j], ph + i0 + j, pl + i0 + j);
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
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x)),
                 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
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
// elsewhere already). qd: the block's 16 q rows; Dec: [15][KP].
__device__ __forceinline__ void dr_prep_diag_block(bf16 *Aqk, bf16 *Aqkl, float *L, const bf16 *qd, const bf16 *ks,
                                                   const float *Dec, const float *bs, float scale, int I, int n,
                                                   int KP, int LK) {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, C = DR_BT, o = 16 * I, c0 = w, c1 = 15 - w;
    {  // the entries no pair computes: above the diagonal, and the rows past n
        const int rr = tid / 16, cc = tid % 16, r = o + rr, c = o + cc;
        if (cc > rr || r >= n) {
            Aqk[r * C + c] = __float2bfloat16(0.f);
            Aqkl[r * C + c] = __float2bfloat16(0.f);
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
        else dr_split(DRS_AQK, scale * v[0], Aqk + r * C + o + c, Aqkl + r * C + o + c);
    }
}

__global__ void __launch_bounds__(DRM_THREADS, 2)  // 2 blocks an SM: at most 128 registers
    dr_prep_mma_kernel(DrWsMma ws, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta,
                       int gate, float scale, int Tlen, int H, int K, int V, const int *offsets, int N) {
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, t4 = lane & 3;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;  // whole block: no chunk here
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
    bf16 *vb = tiles, *kwh = ks, *kwl = vb + C * LV;                           // steps 3-4
    float *X = (float *)kwl;                                                   // step 3
    bf16 *Qg = ws.Qg + sh * C * K, *Qgl = ws.Qgl + sh * C * K, *Ke = ws.Ke + sh * C * K, *Kel = ws.Kel + sh * C * K,
         *Wg = ws.W + sh * C * K, *Wgl = ws.Wl + sh * C * K, *Aqk = ws.Aqk + sh * C * C, *Aqkl = ws.Aqkl + sh * C * C;
    float *Ug = ws.U + sh * C * V;
    const bf16 *qc = q + ((size_t)tok0 * H + h) * K, *kc = k + ((size_t)tok0 * H + h) * K;
    // 16-byte global access: q's rows, the workspace rows of Qg and Ke
    // step 2's operands below the diagonal blocks hi + lo (KDA) or one bf16 (GDN, DeltaNet)
    const bool split_lo = gate == DRG_CHANNEL;
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
            *reinterpret_cast<uint4 *>(Aqkl + r * C + c) = z;
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
        if (i < K) ws.ge[sh * K + i] = expf(acc);
    }
    __syncthreads();

    // 2. Aqk and L: row block I, column blocks J0, J0 + 1 a pass
    for (int I = 0; I < 4; I++)
        for (int J0 = 0; J0 == 0 || J0 < I; J0 += 2) {
            const int nB = min(2, I - J0);  // column blocks J0.. < I of this pass (0: block 0, its diagonal only)
            if (J0 == 0) {  // block I's A operands; its rows of Qg and Ke
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int e = tid + j * DRM_THREADS;
                    if (e >= 16 * K8) break;
                    const int rr = e / K8, i0 = (e % K8) * 8, r = 16 * I + rr;
                    float qf[8], kf[8], gr[8], g0[8], ge[8], a[8], b[8], qg[8], ke[8];
                    drp_unpack8(qv[j], qf);
                    *reinterpret_cast<uint4 *>(qd + rr * LK + i0) = qv[j];  // q itself, for the diagonal block
                    load8(ks + r * LK + i0, kf);
                    drp_lds8g(G + r * KP, i0, gr);
                    drp_lds8g(G + 16 * I * KP, i0, g0);
                    drp_lds8g(G + (C - 1) * KP, i0, ge);
#pragma unroll
                    for (int t = 0; t < 8; t++) {
                        const bool in = r < n && i0 + t < K;
                        const float ex = in ? expf(gr[t] - g0[t]) : 0.f;
                        a[t] = in ? qf[t] * ex : 0.f;
                        b[t] = in ? kf[t] * ex : 0.f;
                        qg[t] = in ? qf[t] * expf(gr[t]) : 0.f;
                        ke[t] = in ? kf[t] * expf(ge[t] - gr[t]) : 0.f;
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
                        drp_stg8(DRS_QG, Qg + (size_t)r * K, Qgl + (size_t)r * K, qg, i0, K, wvec);
                        drp_stg8(DRS_KE, Ke + (size_t)r * K, Kel + (size_t)r * K, ke, i0, K, wvec);
                    }
                }
                if (I < 3) load_q(I + 1);  // in flight through this block row's passes
                // the diagonal block's decay factors Dec[t] = exp(Gamma_{16I+t+1} - Gamma_{16I+t}) (a gate: <= 0)
                for (int e = tid; e < 15 * (KP / 4); e += DRM_THREADS) {
                    const int t = e / (KP / 4), i = (e % (KP / 4)) * 4, r = 16 * I + t;
                    float g1[4], g0[4];
                    drp_lds4f(G + (r + 1) * KP + (i ^ drp_gsw(i)), g1);  // (4 channels stay together)
                    drp_lds4f(G + r * KP + (i ^ drp_gsw(i)), g0);
                    float4 d;
                    d.x = expf(g1[0] - g0[0]), d.y = expf(g1[1] - g0[1]), d.z = expf(g1[2] - g0[2]),
                    d.w = expf(g1[3] - g0[3]);
                    *reinterpret_cast<float4 *>(Dec + t * KP + i) = d;
                }
            }
            // B rows c = 16 J0 .. 16 (J0 + nB) - 1: k_c ⊙ exp(Gamma_ref - Gamma_c)
            for (int e = tid; e < 16 * nB * K8; e += DRM_THREADS) {
                const int cc = e / K8, i0 = (e % K8) * 8, c = 16 * J0 + cc;
                float kf[8], gc[8], g0[8], b[8];
                load8(ks + c * LK + i0, kf);
                drp_lds8g(G + c * KP, i0, gc);
                drp_lds8g(G + 16 * I * KP, i0, g0);
#pragma unroll
                for (int t = 0; t < 8; t++) b[t] = c < n && i0 + t < K ? kf[t] * expf(g0[t] - gc[t]) : 0.f;
                if (split_lo) {
                    uint4 hi, lo;
                    drp_split8(DRS_KC, b, &hi, &lo);
                    *reinterpret_cast<uint4 *>(Bkh + cc * LK + i0) = hi;
                    *reinterpret_cast<uint4 *>(Bkl + cc * LK + i0) = lo;
                } else {
                    store8(Bkh + cc * LK + i0, b);
                }
            }
            __syncthreads();
            if (warp < 4 * nB) {
                // tile (Aqk or L, J) and its 8-column half nh
                const int tile = warp >> 1, nh = warp & 1, isL = tile & 1, J = J0 + (tile >> 1);
                const bf16 *Ah = isL ? Akh : Aqh, *Al = isL ? Akl : Aql;
                const int m = lane >> 3, ks16 = KP / 16;
                const bf16 *Brow = Bkh + (size_t)(16 * (J - J0) + 8 * nh + (lane & 7)) * LK;
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
                if (split_lo) {  // one ldmatrix.x4 gives B's hi and lo of a k-step; three MMAs
                    const bf16 *Bp = (m < 2 ? Brow : Brow + (Bkl - Bkh)) + 8 * (m & 1);
                    for (int kk = 0; kk < ks16; kk++) {
                        uint32_t ah[4], al[4], bb[4];
                        dr_lda(ah, Ah, LK, 0, kk * 16, lane);
                        dr_lda(al, Al, LK, 0, kk * 16, lane);
                        ldsm_x4(bb, Bp + kk * 16);
                        dr_mma3(acc, ah, al, bb, bb + 2);
                    }
                } else {  // one ldmatrix.x4 gives B of two k-steps (an odd last one: matrices 2, 3 unused); one MMA
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
#pragma unroll
                for (int u = 0; u < 4; u += 2) {
                    const int r = 16 * I + gq + (u >= 2 ? 8 : 0), c = 16 * J + nh * 8 + 2 * t4;
                    if (isL) {  // one 8-byte store (rows of 64 fp32: 4-way bank conflict, 8-way as two 4-byte stores)
                        *reinterpret_cast<float2 *>(L + r * LT + c) =
                            make_float2((c < r && r < n) ? bs[r] * acc[u] : 0.f, (c + 1 < r && r < n) ? bs[r] * acc[u + 1] : 0.f);
                    } else {
                        uint32_t hi, lo;
                        drp_split2(DRS_AQK, (c <= r && r < n) ? scale * acc[u] : 0.f,
                                   (c + 1 <= r && r < n) ? scale * acc[u + 1] : 0.f, &hi, &lo);
                        *reinterpret_cast<uint32_t *>(Aqk + r * C + c) = hi;
                        *reinterpret_cast<uint32_t *>(Aqkl + r * C + c) = lo;
                    }
                }
            }
            if (J0 == 0) dr_prep_diag_block(Aqk, Aqkl, L, qd, ks, Dec, bs, scale, I, n, KP, LK);
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
        for (int t = 0; t < 8; t++) w[t] = c < n && i0 + t < K ? kf[t] * expf(gc[t]) : 0.f;
        uint4 hi, lo;
        drp_split8(DRS_KB, w, &hi, &lo);
        *reinterpret_cast<uint4 *>(kwh + c * LK + i0) = hi;
        *reinterpret_cast<uint4 *>(kwl + c * LK + i0) = lo;
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
                drp_split2(DRS_TB, t.x * bs[c], t.y * bs[c + 1], &ah[kk][u], &al[kk][u]);
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
                    mma16816(acc[0], al[kk], bh[0], bh[1]);
                    mma16816(acc[1], al[kk], bh[2], bh[3]);
                    mma16816(acc[0], ah[kk], bh[0], bh[1]);
                    mma16816(acc[1], ah[kk], bh[2], bh[3]);
                } else {
                    dr_ldb_kn(bh, kwh, ld, kk * 16, n0, lane);
                    dr_ldb_kn(bl, kwl, ld, kk * 16, n0, lane);
                    dr_mma3(acc[0], ah[kk], al[kk], bh, bl);
                    dr_mma3(acc[1], ah[kk], al[kk], bh + 2, bl + 2);
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
                    uint32_t hi, lo;
                    drp_split2(DRS_W, acc[nt][u], acc[nt][u + 1], &hi, &lo);
                    *reinterpret_cast<uint32_t *>(Wst + rr * 16 + sc) = hi;
                    *reinterpret_cast<uint32_t *>(Wst + 256 + rr * 16 + sc) = lo;
                }
            __syncwarp();
#pragma unroll
            for (int m = 0; m < 2; m++) {  // hi, then lo: 16 rows x 2 chunks, a 32-byte sector a row
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

// ---- walk: one block per (sequence, head, V-tile of BV), the chunks in order ------------
// The state tile h [KP][BV] lives in registers as fp32 MMA accumulators: warp w owns the
// 16-row m-tiles w + 8u (u < MU: MU = 1 for K <= 128, 2 up to 256), all BV / 8 column tiles.
// Per chunk:
//   a. h[n] goes to shared memory as hi + lo (the B operand; a fragment's column pair a 4-byte
//      store) and, after the barrier, from there to the workspace by 16-byte row segments (h,
//      and the backward's hl); W and Ke of the chunk (hi + lo) arrive by cp.async, W issued
//      during the previous chunk's step c and Ke during its last barrier, so each load overlaps
//      a compute step without a second buffer;
//   b. Delta = U - W h[n]: warp (m-tile w % 4, columns BV / 2 (w / 4)..), A = W, B = h (U read
//      at the chunk's start, 8 bytes a lane); after a barrier (every warp has read h) Delta
//      overwrites h in shared memory (hi + lo: h is spent until the next chunk's step a), and
//      after the next barrier U in the workspace, as pairs by 16-byte groups from those tiles
//      (fp32 from the fragments under HYBRID_DR_DELTA_F32=1);
//   c. h[n+1] = diag(e^Gamma_end) h[n] + Ke^T Delta: A = Ke^T (the transposing ldmatrix), B = Delta.
// Every product on three MMAs (hi hi + hi lo + lo hi). Each column's operations and their order
// are the same for any BV, so the tile (walk.cuh) changes no bit.
// Shared memory (bf16): W, Wl, Ke, Kel [64][LK]; h, hl (then Delta, Deltal) [max(KP, 64)][BV + 8].
// K = V = 128, BV = 64: 104 KiB (122 before Delta shared h's buffer), so two blocks an SM with
// MU = 1's 128 registers; 256 blocks at B8 H16 fit one wave of 264 on the H200's 132 SMs.
static size_t walk_mma_smem(int K, int BV) {
    const size_t KP = dr_pad16(K), LK = KP + DR_PAD, HR = KP > DR_BT ? KP : DR_BT;
    return (4 * DR_BT * LK + 2 * HR * (BV + DR_PAD)) * 2;
}

template <int BV, int MU>
__global__ void __launch_bounds__(DRM_THREADS, MU == 1 ? 2 : 1)  // MU = 1: 2 blocks an SM, <= 128 registers
    dr_walk_mma_kernel(DrWsMma ws, float *hT, const float *h0, int Tlen, int H, int K, int V, const int *offsets) {
    // NT column tiles of the state, NB of a warp's Delta (BV / 2 columns)
    constexpr int NT = BV / 8, NB = BV / 16;
    static_assert(BV % 32 == 0, "step b: pairs of 8-column tiles in each warp's half");
    // blockIdx.x = sequence * V-tiles + V-tile: a sequence's V-tiles run side by side and
    // share W and Ke through L2
    const int vt = (V + BV - 1) / BV, s = blockIdx.x / vt, h = blockIdx.y, j0 = (blockIdx.x % vt) * BV;
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    const int KP = dr_pad16(K), LK = KP + DR_PAD, LH = BV + DR_PAD, nmt = KP / 16, HR = KP > C ? KP : C;
    const int bv = V - j0 < BV ? V - j0 : BV;
    DYNAMIC_SMEM(bf16, sm);
    bf16 *Wh = sm, *Wl = Wh + C * LK, *Kh = Wl + C * LK, *Kl = Kh + C * LK, *hh = Kl + C * LK, *hl = hh + HR * LH,
         *Dh = hh, *Dl = hl;  // Delta [64][LH] over h (step b)
    int bos, len;
    dr_seq_range(offsets, Tlen, s, &bos, &len);
    const int base = dr_seq_base(bos, s), nch = (len + C - 1) / C;
    const size_t task = (size_t)s * H + h;  // (N, H, K, V) states

    // h: hacc[u][nt] is the C fragment of rows 16 (warp + 8u).., columns 8 nt..
    float hacc[MU][NT][4];
#pragma unroll
    for (int u = 0; u < MU; u++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = (warp + 8 * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4 + (e & 1);
                hacc[u][nt][e] = (h0 && i < K && jj < bv) ? h0[(task * K + i) * V + j0 + jj] : 0.f;
            }
    // W of chunk n + 1 loads during chunk n's h update, Ke of chunk n + 1 during chunk n + 1's
    // Delta: one buffer each, every load in flight behind a compute step
    auto issue_w = [&](int ci) {
        const int n = len - ci * C < C ? len - ci * C : C;
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Wh, LK, ws.W + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        dr_load_tile(Wl, LK, ws.Wl + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        cp_async_commit();
    };
    auto issue_k = [&](int ci) {
        const int n = len - ci * C < C ? len - ci * C : C;
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Kh, LK, ws.Ke + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        dr_load_tile(Kl, LK, ws.Kel + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        cp_async_commit();
    };
    if (nch > 0) {
        issue_w(0);
        issue_k(0);
    }
    for (int ci = 0; ci < nch; ci++) {
        const int n = len - ci * C < C ? len - ci * C : C;
        const size_t sh = (size_t)(base + ci) * H + h;
        bf16 *hg = ws.h + sh * K * V, *hgl = ws.hl ? ws.hl + sh * K * V : NULL;  // (lo: the backward's only)
        float *Ug = ws.U + sh * C * V;
        const int mtb = warp & 3, c0 = (warp >> 2) * (BV / 2);
        // this thread's U entries of step b and e^Gamma_end rows of step c, loaded early; U by
        // column pairs (8 bytes: a row's 4 lanes fill a 32-byte sector) where V is even (then
        // so is bv, and jj < bv covers jj + 1)
        float uv[NB][4], ge[MU][2];
#pragma unroll
        for (int nt = 0; nt < NB; nt++)
#pragma unroll
            for (int e2 = 0; e2 < 4; e2 += 2) {
                const int r = mtb * 16 + gq + (e2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4;
                const float *pu = Ug + (size_t)r * V + j0 + jj;
                if (V % 2 == 0) {
                    const float2 x = r < n && jj < bv ? *reinterpret_cast<const float2 *>(pu) : make_float2(0.f, 0.f);
                    uv[nt][e2] = x.x, uv[nt][e2 + 1] = x.y;
                } else {
                    uv[nt][e2] = r < n && jj < bv ? pu[0] : 0.f;
                    uv[nt][e2 + 1] = r < n && jj + 1 < bv ? pu[1] : 0.f;
                }
            }
#pragma unroll
        for (int u = 0; u < MU; u++) {
            const int i0 = (warp + 8 * u) * 16 + gq, i1 = i0 + 8;
            ge[u][0] = i0 < K ? ws.ge[sh * K + i0] : 0.f;
            ge[u][1] = i1 < K ? ws.ge[sh * K + i1] : 0.f;
        }
        // a. h[n] to shared memory (hi + lo, a column pair a 4-byte store) while the tiles are in
        // flight; to the workspace after the barrier, by 16-byte row segments
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e2 = 0; e2 < 4; e2 += 2) {
                        const int i = (warp + 8 * u) * 16 + gq + (e2 ? 8 : 0), jj = nt * 8 + 2 * t4;
                        dr_walk_split2(DRS_H, hacc[u][nt][e2], hacc[u][nt][e2 + 1], hh, hl, i * LH + jj);
                    }
        cp_async_wait<1>();  // W of this chunk (its Ke may still be in flight)
        __syncthreads();
        dr_walk_store_tile(hg + j0, V, hh, LH, K, bv, BV, tid, DRM_THREADS);  // (before step b's barrier)
        if (hgl) dr_walk_store_tile(hgl + j0, V, hl, LH, K, bv, BV, tid, DRM_THREADS);
        // b. Delta = U - W h[n]
        {
            const int mt = mtb;
            float acc[NB][4] = {};
            for (int kk = 0; kk < nmt; kk++) {
                uint32_t ah[4], al[4];
                dr_lda(ah, Wh, LK, mt * 16, kk * 16, lane);
                dr_lda(al, Wl, LK, mt * 16, kk * 16, lane);
#pragma unroll
                for (int p = 0; p < NB / 2; p++) {
                    uint32_t bh[4], bl[4];
                    dr_ldb_kn(bh, hh, LH, kk * 16, c0 + p * 16, lane);
                    dr_ldb_kn(bl, hl, LH, kk * 16, c0 + p * 16, lane);
                    dr_mma3(acc[2 * p], ah, al, bh, bl);
                    dr_mma3(acc[2 * p + 1], ah, al, bh + 2, bl + 2);
                }
            }
            __syncthreads();  // every warp has read h: Delta takes its buffer
#pragma unroll
            for (int nt = 0; nt < NB; nt++)
#pragma unroll
                for (int e2 = 0; e2 < 4; e2 += 2) {  // columns jj, jj + 1 of row r
                    const int r = mt * 16 + gq + (e2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4;
                    const bool in0 = r < n && jj < bv, in1 = r < n && jj + 1 < bv;
                    const float d0 = in0 ? uv[nt][e2] - acc[nt][e2] : 0.f, d1 = in1 ? uv[nt][e2 + 1] - acc[nt][e2 + 1] : 0.f;
                    dr_walk_split2(DRS_DELTA, d0, d1, Dh, Dl, r * LH + jj);
                    if (!ws.dsplit) {  // the fp32 layout (HYBRID_DR_DELTA_F32=1); pairs: after the barrier
                        if (in0) Ug[(size_t)r * V + j0 + jj] = d0;
                        if (in1) Ug[(size_t)r * V + j0 + jj + 1] = d1;
                    }
                }
        }
        cp_async_wait<0>();  // Ke of this chunk
        __syncthreads();
        if (ci + 1 < nch) issue_w(ci + 1);
        // Delta's hi + lo pairs over U (chunk.cuh, the Delta pair layout) from the shared tiles by
        // 16-byte groups. Every thread's U loads of this chunk have completed (their values are
        // in Delta, before the barrier), so the copy may write entries that other threads read.
        if (ws.dsplit) dr_walk_store_split_tile((bf16 *)Ug, V, j0, Dh, Dl, LH, n, bv, BV, tid, DRM_THREADS);
        // c. h[n+1] = diag(e^Gamma_end) h[n] + Ke^T Delta
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt) {
                const int m0 = (warp + 8 * u) * 16;
                const float e0 = ge[u][0], e1 = ge[u][1];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    hacc[u][nt][0] *= e0, hacc[u][nt][1] *= e0;
                    hacc[u][nt][2] *= e1, hacc[u][nt][3] *= e1;
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    uint32_t ah[4], al[4];
                    dr_lda_t(ah, Kh, LK, m0, kk * 16, lane);
                    dr_lda_t(al, Kl, LK, m0, kk * 16, lane);
#pragma unroll
                    for (int p = 0; p < NT / 2; p++) {
                        uint32_t bh[4], bl[4];
                        dr_ldb_kn(bh, Dh, LH, kk * 16, p * 16, lane);
                        dr_ldb_kn(bl, Dl, LH, kk * 16, p * 16, lane);
                        dr_mma3(hacc[u][2 * p], ah, al, bh, bl);
                        dr_mma3(hacc[u][2 * p + 1], ah, al, bh + 2, bl + 2);
                    }
                }
            }
        __syncthreads();  // Ke, h and Delta are rewritten
        if (ci + 1 < nch) issue_k(ci + 1);
    }
    if (hT)
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = (warp + 8 * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4 + (e & 1);
                        if (i < K && jj < bv) hT[(task * K + i) * V + j0 + jj] = hacc[u][nt][e];
                    }
}

// The walk's tiles at head size K: BV = 32 and 64, built with MU = 1 (K <= 128: 2 blocks an
// SM by registers) or 2 (1 block).
static void dr_walk_tiles(int K, DrWalkTile tiles[2]) {
    const int rb = dr_pad16(K) <= 128 ? 2 : 1;
    tiles[0] = DrWalkTile{32, walk_mma_smem(K, 32), rb};
    tiles[1] = DrWalkTile{64, walk_mma_smem(K, 64), rb};
}

// The V tile width the walk launches with for `pairs` (sequence, head) pairs at K, V: walk.cuh's
// choice, HYBRID_DR_WALK_BV included (tests/gpu/test_delta_rule.c forces the other tile).
extern "C" int cuda_delta_walk_tile(int K, int V, int pairs) {
    DrWalkTile tiles[2];
    dr_walk_tiles(K, tiles);
    return tiles[dr_walk_pick(tiles, 2, (size_t)pairs, V, "HYBRID_DR_WALK_BV")].bv;
}

// Launches the walk for N sequences at the tile of walk.cuh's choice: BV = 32 or 64,
// MU = 1 (K <= 128: 2 blocks an SM where the shared memory allows) or 2.
template <int MU>
static void dr_walk_launch(const DrWsMma *ws, float *hT, const float *h0, int T, int H, int K, int V,
                           const int *offsets, int N) {
    DrWalkTile tiles[2];
    dr_walk_tiles(K, tiles);
    const int a = dr_walk_pick(tiles, 2, (size_t)N * H, V, "HYBRID_DR_WALK_BV");
    const unsigned vt = (unsigned)((V + tiles[a].bv - 1) / tiles[a].bv);
    if (tiles[a].bv == 32)
        launch_kernel(dr_walk_mma_kernel<32, MU>, dim3(N * vt, H), dim3(DRM_THREADS), tiles[a].smem, *ws, hT, h0, T,
                      H, K, V, offsets);
    else
        launch_kernel(dr_walk_mma_kernel<64, MU>, dim3(N * vt, H), dim3(DRM_THREADS), tiles[a].smem, *ws, hT, h0, T,
                      H, K, V, offsets);
}

// ---- output: one block per (chunk slot, head, V-tile of 64), 4 warps ---------------------
// o = scale Qg h[n] + Aqk Delta (Aqk carries scale): warp w the rows 16w.., all 64 columns;
// Aqk is lower triangular, so the Delta product takes k-steps kk <= w. Qg h[n]: two MMAs (h[n]
// one bf16, chunk.cuh); Aqk Delta: three.
// Shared memory (bf16): Qg hi, lo [64][LK] | h [KP][72] | Aqk hi, lo [64][72]; Delta hi, lo
// [64][72] take Qg's place once every warp is done with Qg h[n] (Delta's fp32 values are loaded
// into registers before that product, so the load still overlaps it). K = V = 128: 70 KiB,
// 3 blocks an SM (88 KiB before, with Delta in a buffer of its own: 2 blocks, 8 warps).
// o leaves through shared memory: warp w rounds its 16 x 64 accumulators to bf16 into its own
// rows of Aqk hi (only warp w reads them), then stores them by 16-byte row segments, a 128-byte
// row of o ([T][H][V], the V-tile's columns contiguous) per 8 lanes; the MMA fragment layout
// stored 4 bytes a lane, 8 rows an instruction (8 of 32 bytes a sector used).
static size_t output_mma_smem(int K) {
    const size_t KP = dr_pad16(K), LK = KP + DR_PAD, LH = DR_MBV + DR_PAD, q = 2 * DR_BT * LK, d = 2 * DR_BT * LH;
    return ((q > d ? q : d) + KP * LH + 2 * DR_BT * LH) * 2;
}

template <bool SPLIT>  // Delta as hi + lo pairs (ws.dsplit), else fp32
__global__ void __launch_bounds__(DRO_THREADS, 3)
    dr_output_mma_kernel(DrWsMma ws, bf16 *o, float scale, int Tlen, int H, int K, int V, const int *offsets, int N) {
    // blockIdx.x = slot * V-tiles + V-tile (a chunk's V-tiles side by side: Qg, Aqk through L2)
    const int vt = (V + DR_MBV - 1) / DR_MBV, x = blockIdx.x / vt, h = blockIdx.y, j0 = (blockIdx.x % vt) * DR_MBV;
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    const int KP = dr_pad16(K), LK = KP + DR_PAD, LH = DR_MBV + DR_PAD, nmt = KP / 16;
    const int bv = V - j0 < DR_MBV ? V - j0 : DR_MBV;
    const size_t sh = (size_t)x * H + h;
    DYNAMIC_SMEM(bf16, sm);
    const int qsz = 2 * C * LK > 2 * C * LH ? 2 * C * LK : 2 * C * LH;
    bf16 *Qh = sm, *Ql = Qh + C * LK, *Dh = sm, *Dl = Dh + C * LH, *Hh = sm + qsz, *Ah = Hh + KP * LH,
         *Al = Ah + C * LH;
    dr_load_tile(Qh, LK, ws.Qg + sh * C * K, K, C, KP, n, K, tid, DRO_THREADS);
    dr_load_tile(Ql, LK, ws.Qgl + sh * C * K, K, C, KP, n, K, tid, DRO_THREADS);
    dr_load_tile(Hh, LH, ws.h + sh * K * V + j0, V, KP, DR_MBV, K, bv, tid, DRO_THREADS);
    dr_load_tile(Ah, LH, ws.Aqk + sh * C * C, C, C, C, n, C, tid, DRO_THREADS);
    dr_load_tile(Al, LH, ws.Aqkl + sh * C * C, C, C, C, n, C, tid, DRO_THREADS);
    cp_async_commit();
    // Delta (ws.U once the walk has run) into registers now, into shared memory over Qg once
    // every warp is done with Qg h[n], so its load overlaps that product. SPLIT (ws.dsplit): the
    // workspace holds its hi + lo pairs (chunk.cuh, the Delta pair layout: groups of 8 columns, 8 hi then
    // 8 lo), read as they are; else fp32, split after the barrier (the same bits either way).
    constexpr int ND = DR_BT * DR_MBV / DRO_THREADS;  // Delta entries a thread
    float dv[SPLIT ? 1 : ND];
    __nv_bfloat162 dp[SPLIT ? ND : 1];  // x = hi, y = lo
#pragma unroll
    for (int u = 0; u < ND; u++) {
        const int e = tid + u * DRO_THREADS, r = e / DR_MBV, jj = e % DR_MBV;
        const bool in = r < n && jj < bv;
        if constexpr (SPLIT) {
            const int j = j0 + jj, g8 = j & ~7, w = V - g8 < 8 ? V - g8 : 8;
            const bf16 *src = (const bf16 *)(ws.U + sh * C * V) + (size_t)r * 2 * V + 2 * g8 + (j & 7);
            dp[u].x = in ? src[0] : __float2bfloat16(0.f);
            dp[u].y = in ? src[w] : __float2bfloat16(0.f);
        } else {
            dv[u] = in ? ws.U[sh * C * V + (size_t)r * V + j0 + jj] : 0.f;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float acc[8][4] = {};
    for (int kk = 0; kk < nmt; kk++) {
        uint32_t ah[4], al[4];
        dr_lda(ah, Qh, LK, warp * 16, kk * 16, lane);
        dr_lda(al, Ql, LK, warp * 16, kk * 16, lane);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t b[4];
            dr_ldb_kn(b, Hh, LH, kk * 16, p * 16, lane);
            mma16816(acc[2 * p], al, b[0], b[1]);
            mma16816(acc[2 * p + 1], al, b[2], b[3]);
            mma16816(acc[2 * p], ah, b[0], b[1]);
            mma16816(acc[2 * p + 1], ah, b[2], b[3]);
        }
    }
    __syncthreads();  // every warp is done with Qg: Delta hi, lo over it
#pragma unroll
    for (int u = 0; u < ND; u++) {
        const int e = tid + u * DRO_THREADS, r = e / DR_MBV, jj = e % DR_MBV;
        if constexpr (SPLIT) Dh[r * LH + jj] = dp[u].x, Dl[r * LH + jj] = dp[u].y;
        else dr_split(DRS_DELTA, dv[u], Dh + r * LH + jj, Dl + r * LH + jj);
    }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[nt][e] *= scale;
    for (int kk = 0; kk <= warp; kk++) {
        uint32_t ah[4], al[4];
        dr_lda(ah, Ah, LH, warp * 16, kk * 16, lane);
        dr_lda(al, Al, LH, warp * 16, kk * 16, lane);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t bh[4], bl[4];
            dr_ldb_kn(bh, Dh, LH, kk * 16, p * 16, lane);
            dr_ldb_kn(bl, Dl, LH, kk * 16, p * 16, lane);
            dr_mma3(acc[2 * p], ah, al, bh, bl);
            dr_mma3(acc[2 * p + 1], ah, al, bh + 2, bl + 2);
        }
    }
    // o: this warp's rows of Aqk hi receive its bf16 tile (row stride 72 bf16 = 36 words: the 8
    // rows x 4 lanes of a fragment store hit 32 distinct banks), then 16-byte row segments
    __syncwarp();  // the warp's last ldmatrix of those rows is done
    bf16 *Os = Ah + (size_t)warp * 16 * LH;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const int rr = gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4;
            *reinterpret_cast<uint32_t *>(Os + rr * LH + jj) = pack_bf16(acc[nt][e], acc[nt][e + 1]);
        }
    __syncwarp();
    bf16 *og = o + ((size_t)tok0 * H + h) * V + j0;  // row r of the tile at og + r H V
    const bool ovec = V % 8 == 0 && ((uintptr_t)og & 15) == 0;
#pragma unroll
    for (int u = 0; u < 4; u++) {  // 16 rows x 8 segments of 8 columns, 4 a lane
        const int idx = lane + 32 * u, rr = idx >> 3, c = (idx & 7) * 8, r = warp * 16 + rr;
        if (r >= n || c >= bv) continue;
        bf16 *d = og + (size_t)r * H * V + c;
        const bf16 *sp = Os + rr * LH + c;
        if (ovec && c + 8 <= bv) *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(sp);
        else
            for (int j = 0; j < 8 && c + j < bv; j++) d[j] = sp[j];
    }
}

void dr_forward_mma(int gate, bf16 *o, float *hT, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                    const bf16 *beta, const float *h0, float scale, int B, int T, int H, int K, int V,
                    const int *offsets, int N, const DrWsMma *ws) {
    const size_t slots = dr_num_slots(B, T, N);
    if (N == 0) return;
    dr_audit_upload();
    const unsigned vt = (unsigned)((V + DR_MBV - 1) / DR_MBV);
    // the prep's 16-byte stores of Aqk and T (dr_ws_mma_bind's arrays lie at 256-byte offsets:
    // a 16-byte aligned workspace, as every caller carves it, is enough)
    if (!is_aligned16(ws->Aqk) || !is_aligned16(ws->Aqkl) || (ws->T && !is_aligned16(ws->T)))
        die("delta_chunk: the tensor-core workspace is not 16-byte aligned");
    // (the PROFILE parts: HYBRID_CUDA_PROFILE=1 times each kernel; the backward's recomputation
    // of the forward counts in the same parts)
    if (slots > 0) {
        PROFILE("delta_chunk/prep");
        launch_kernel(dr_prep_mma_kernel, dim3((unsigned)slots, H), dim3(DRM_THREADS), prep_mma_smem(K, V), *ws, q, k,
                      v, g, beta, gate, scale, T, H, K, V, offsets, N);
    }
    {
        PROFILE("delta_chunk/walk");
        if (dr_pad16(K) <= 128) dr_walk_launch<1>(ws, hT, h0, T, H, K, V, offsets, N);
        else dr_walk_launch<2>(ws, hT, h0, T, H, K, V, offsets, N);
    }
    if (slots > 0 && o) {
        PROFILE("delta_chunk/output");
        launch_kernel(ws->dsplit ? dr_output_mma_kernel<true> : dr_output_mma_kernel<false>,
                      dim3((unsigned)(slots * vt), H), dim3(DRO_THREADS), output_mma_smem(K), *ws, o, scale, T, H, K,
                      V, offsets, N);
    }
}

#ifdef HYBRID_DR_PRECISION_AUDIT
// The precision audit's mask (chunk.cuh, dr_lo; split_operand.h): bit DRS_x zeroes operand x's lo
// parts in the tensor-core kernels launched after the call
unsigned dr_audit_mask_host;
extern "C" void cuda_delta_precision_audit_mask(unsigned mask) { dr_audit_mask_host = mask; }
#endif
