// Causal attention with separate strided q, k, v and d_qk != d_v on bf16 tensor cores
// (docs/hybrid.md, "Causal attention with a stored logsumexp"; the flash scheme of
// kernels/core/attention.cu generalised): tiles of 64 queries x 64 keys, 4 warps of 16 rows,
// fp32 accumulation, the next K/V (or Q/dO) tile double-buffered through cp.async.
//   forward  one block per (query tile, b, h): online softmax over the key tiles <= it,
//            out = O / l and lse = m + log l (fp32).
//   dK, dV   one block per (key tile, b, h), over the query tiles >= it:
//            S^T = K Q^T, P^T = exp(S^T - lse), dV += P^T dO, dP^T = V dO^T,
//            dS^T = P^T (dP^T - D), dK += dS^T Q.
//   dQ       one block per (query tile, b, h), over the key tiles <= it: S, P, dP = dO V^T,
//            dS, dQ += dS K (S and dP recomputed: no dS buffer).
// Every gradient element has one writer and a fixed summation order: deterministic.
//
// Head widths: template <DQK, DV> in {<64, 64>, <128, 128>, <192, 128>}; a head narrower than
// its template (a multiple of 8, e.g. dqk = 48, dv = 32 on <64, 64>) is zero-padded in shared
// memory and its extra output columns are not stored.
// Registers (the MLA shape DQK = 192, DV = 128): the Q (or K, dO, V) A fragments are re-read
// from shared memory each step instead of held (48 registers saved); the forward holds O (64
// floats) + S (32), the dQ kernel dQ (96) + S (32) + dP (32). dK and dV of one key tile in
// one kernel would hold 96 + 64 accumulators plus S and dP (~250 registers: spills), so above
// DQK + DV = 128 they are two launches of one kernel template (MODE 1: dV only; MODE 2: dK
// only), which recomputes S^T once more per tile pair (one extra QK product out of eight).
// ptxas (CUDA 13.0, sm_90) at <192, 128>: forward 168 registers, dV 173, dK 255 with 20 bytes
// of spills, dQ 255 without; <64, 64> (dK and dV fused) 214. Shared memory at <192, 128>:
// forward 112 KB (2 blocks / SM), dQ and dK 129 KB (1), dV 112 KB (2): occupancy (4 warps a
// block) is the first thing to measure and tune on the GPU.
#include <math.h>

#include "kernels/mla/attention.cuh"
#include "kernels/mla/attn_tiles.cuh"

// ---------------------------------------------------------------------------
// forward

template <int DQK, int DV>
constexpr size_t fwd_smem() {
    return 3 * sizeof(MTile<DQK>) + 2 * sizeof(MTile<DV>);  // sQ, sK[2], sV[2]
}

template <int DQK, int DV>
__global__ void __launch_bounds__(MLA_THREADS) mla_attn_fwd_kernel(bf16 *out, float *lse, const bf16 *q,
                                                                   const bf16 *k, const bf16 *v, AttnDev a) {
    DYNAMIC_SMEM(unsigned char, smem);
    MTile<DQK> &sQ = *reinterpret_cast<MTile<DQK> *>(smem);
    MTile<DQK> *sK = reinterpret_cast<MTile<DQK> *>(smem + sizeof(MTile<DQK>));
    MTile<DV> *sV = reinterpret_cast<MTile<DV> *>(smem + 3 * sizeof(MTile<DQK>));
    const int T = a.T, ntiles = (T + MLA_TILE - 1) / MLA_TILE;
    const int qt = ntiles - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bf16 *qb = q + (size_t)b * T * a.q_row + (size_t)h * a.q_head;
    const bf16 *kb = k + (size_t)b * T * a.k_row + (size_t)h * a.k_head;
    const bf16 *vb = v + (size_t)b * T * a.v_row + (size_t)h * a.v_head;
    const int q0 = qt * MLA_TILE;

    mtile_load(sQ, qb + (size_t)q0 * a.q_row, a.q_row, T - q0, a.dqk);
    mtile_load(sK[0], kb, a.k_row, T, a.dqk);
    mtile_load(sV[0], vb, a.v_row, T, a.dv);
    cp_async_commit();

    float o[DV / 8][4], m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
    zero_acc<DV / 8>(o);
    const int qrow0 = q0 + warp * 16 + g;  // this thread's rows: qrow0, qrow0 + 8

    for (int j = 0; j <= qt; j++) {
        if (j < qt) {
            const int k1 = (j + 1) * MLA_TILE;
            mtile_load(sK[(j + 1) & 1], kb + (size_t)k1 * a.k_row, a.k_row, T - k1, a.dqk);
            mtile_load(sV[(j + 1) & 1], vb + (size_t)k1 * a.v_row, a.v_row, T - k1, a.dv);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        float s[8][4];
        zero_acc<8>(s);
        mma_rows_tileT<DQK>(s, sQ, warp * 16, sK[j & 1], lane);

        // base-2 scores; the causal mask on the diagonal tile (it also removes the keys past T,
        // which are zero rows: every other tile lies wholly before the query tile)
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[nt][e] * a.sl2;
                if (j == qt) {
                    const int key = j * MLA_TILE + nt * 8 + 2 * t + (e & 1), qq = qrow0 + (e >> 1) * 8;
                    if (key > qq) x = -INFINITY;
                }
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        // online softmax (tile 0 always has key 0 <= every query: the maxima are finite)
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mnew = fmaxf(m_r[r], mx[r]);
            corr[r] = exp2f(m_r[r] - mnew);
            m_r[r] = mnew;
            l_r[r] *= corr[r];
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(s[nt][e] - m_r[e >> 1]);
                s[nt][e] = p;
                l_r[e >> 1] += p;
            }
#pragma unroll
        for (int nt = 0; nt < DV / 8; nt++) {
            o[nt][0] *= corr[0];
            o[nt][1] *= corr[0];
            o[nt][2] *= corr[1];
            o[nt][3] *= corr[1];
        }
        mma_p_tile<DV>(o, s, sV[j & 1], lane);
        __syncthreads();  // this buffer is refilled two iterations on
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
    }
    const size_t orow = (size_t)a.NH * a.dv;
    store_rows<DV>(out + (size_t)b * T * orow + (size_t)h * a.dv, orow, q0 + warp * 16, T, a.dv, o, 1.f / l_r[0],
                   1.f / l_r[1], lane);
    if (t == 0) {
        float *L = lse + ((size_t)b * a.NH + h) * T;
        if (qrow0 < T) L[qrow0] = (m_r[0] + log2f(l_r[0])) * MLA_LN2;
        if (qrow0 + 8 < T) L[qrow0 + 8] = (m_r[1] + log2f(l_r[1])) * MLA_LN2;
    }
}

// ---------------------------------------------------------------------------
// backward: dK, dV per key tile (MODE 0: both; 1: dV only; 2: dK only)

template <int DQK, int DV, int MODE>
constexpr size_t dkdv_smem() {
    // sK, sQ[2] | sdO[2] | sV (not for dV only) | sL[2][64], sD[2][64]
    return 3 * sizeof(MTile<DQK>) + (MODE == 1 ? 2 : 3) * sizeof(MTile<DV>) + 4 * MLA_TILE * sizeof(float);
}

template <int DQK, int DV, int MODE>
__global__ void __launch_bounds__(MLA_THREADS)
    mla_attn_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                         const float *lse, const float *Dg, AttnDev a) {
    DYNAMIC_SMEM(unsigned char, smem);
    MTile<DQK> &sK = *reinterpret_cast<MTile<DQK> *>(smem);
    MTile<DQK> *sQ = reinterpret_cast<MTile<DQK> *>(smem + sizeof(MTile<DQK>));
    MTile<DV> *sdO = reinterpret_cast<MTile<DV> *>(smem + 3 * sizeof(MTile<DQK>));
    MTile<DV> &sV = *reinterpret_cast<MTile<DV> *>(smem + 3 * sizeof(MTile<DQK>) + 2 * sizeof(MTile<DV>));
    float(*sL)[MLA_TILE] = reinterpret_cast<float(*)[MLA_TILE]>(smem + 3 * sizeof(MTile<DQK>) +
                                                                (MODE == 1 ? 2 : 3) * sizeof(MTile<DV>));
    float(*sD)[MLA_TILE] = sL + 2;
    const int T = a.T, ntiles = (T + MLA_TILE - 1) / MLA_TILE;
    const int kt = blockIdx.x;  // key tile 0 has the most query tiles: launched first
    const int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t orow = (size_t)a.NH * a.dv;
    const bf16 *qb = q + (size_t)b * T * a.q_row + (size_t)h * a.q_head;
    const bf16 *kb = k + (size_t)b * T * a.k_row + (size_t)h * a.k_head;
    const bf16 *vb = v + (size_t)b * T * a.v_row + (size_t)h * a.v_head;
    const bf16 *ob = dout + (size_t)b * T * orow + (size_t)h * a.dv;
    const float *Lrow = lse + ((size_t)b * a.NH + h) * T, *Drow = Dg + ((size_t)b * a.NH + h) * T;
    const int k0 = kt * MLA_TILE;

    auto prefetch = [&](int i, int buf) {
        const int q0 = i * MLA_TILE;
        mtile_load(sQ[buf], qb + (size_t)q0 * a.q_row, a.q_row, T - q0, a.dqk);
        mtile_load(sdO[buf], ob + (size_t)q0 * orow, orow, T - q0, a.dv);
        for (int r = threadIdx.x; r < MLA_TILE; r += MLA_THREADS) {
            const int qq = q0 + r;
            sL[buf][r] = qq < T ? Lrow[qq] * MLA_LOG2E : INFINITY;  // P = 0 past the end
            sD[buf][r] = qq < T ? Drow[qq] : 0.f;
        }
        cp_async_commit();
    };

    mtile_load(sK, kb + (size_t)k0 * a.k_row, a.k_row, T - k0, a.dqk);
    if (MODE != 1) mtile_load(sV, vb + (size_t)k0 * a.v_row, a.v_row, T - k0, a.dv);
    prefetch(kt, 0);  // one group with K and V

    float dka[DQK / 8][4], dva[DV / 8][4];
    zero_acc<DQK / 8>(dka);
    zero_acc<DV / 8>(dva);
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
        const int q0 = i * MLA_TILE;

        float st[8][4];  // S^T then P^T: rows = keys, columns = queries
        zero_acc<8>(st);
        mma_rows_tileT<DQK>(st, sK, warp * 16, sQ[buf], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ql = nt * 8 + 2 * t + (e & 1);
                float p = exp2f(st[nt][e] * a.sl2 - sL[buf][ql]);
                if (i == kt && krow0 + (e >> 1) * 8 > q0 + ql) p = 0.f;
                st[nt][e] = p;
            }
        if constexpr (MODE != 2) mma_p_tile<DV>(dva, st, sdO[buf], lane);
        if constexpr (MODE != 1) {
            float dpt[8][4];  // dP^T then dS^T
            zero_acc<8>(dpt);
            mma_rows_tileT<DV>(dpt, sV, warp * 16, sdO[buf], lane);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ql = nt * 8 + 2 * t + (e & 1);
                    dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sD[buf][ql]);
                }
            mma_p_tile<DQK>(dka, dpt, sQ[buf], lane);
        }
        __syncthreads();  // this buffer is refilled next iteration
    }
    if constexpr (MODE != 1)
        store_rows<DQK>(dk + (size_t)b * T * a.k_row + (size_t)h * a.k_head, a.k_row, k0 + warp * 16, T, a.dqk, dka,
                        a.scale, a.scale, lane);
    if constexpr (MODE != 2)
        store_rows<DV>(dv + (size_t)b * T * a.v_row + (size_t)h * a.v_head, a.v_row, k0 + warp * 16, T, a.dv, dva,
                       1.f, 1.f, lane);
}

// ---------------------------------------------------------------------------
// backward: dQ per query tile

template <int DQK, int DV>
constexpr size_t dq_smem() {
    return 3 * sizeof(MTile<DQK>) + 3 * sizeof(MTile<DV>);  // sQ, sK[2] | sdO, sV[2]
}

template <int DQK, int DV>
__global__ void __launch_bounds__(MLA_THREADS)
    mla_attn_dq_kernel(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                       const float *Dg, AttnDev a) {
    DYNAMIC_SMEM(unsigned char, smem);
    MTile<DQK> &sQ = *reinterpret_cast<MTile<DQK> *>(smem);
    MTile<DQK> *sK = reinterpret_cast<MTile<DQK> *>(smem + sizeof(MTile<DQK>));
    MTile<DV> &sdO = *reinterpret_cast<MTile<DV> *>(smem + 3 * sizeof(MTile<DQK>));
    MTile<DV> *sV = reinterpret_cast<MTile<DV> *>(smem + 3 * sizeof(MTile<DQK>) + sizeof(MTile<DV>));
    const int T = a.T, ntiles = (T + MLA_TILE - 1) / MLA_TILE;
    const int qt = ntiles - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / a.NH, h = blockIdx.y % a.NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const size_t orow = (size_t)a.NH * a.dv;
    const bf16 *qb = q + (size_t)b * T * a.q_row + (size_t)h * a.q_head;
    const bf16 *kb = k + (size_t)b * T * a.k_row + (size_t)h * a.k_head;
    const bf16 *vb = v + (size_t)b * T * a.v_row + (size_t)h * a.v_head;
    const bf16 *ob = dout + (size_t)b * T * orow + (size_t)h * a.dv;
    const float *Lrow = lse + ((size_t)b * a.NH + h) * T, *Drow = Dg + ((size_t)b * a.NH + h) * T;
    const int q0 = qt * MLA_TILE;

    mtile_load(sQ, qb + (size_t)q0 * a.q_row, a.q_row, T - q0, a.dqk);
    mtile_load(sdO, ob + (size_t)q0 * orow, orow, T - q0, a.dv);
    mtile_load(sK[0], kb, a.k_row, T, a.dqk);
    mtile_load(sV[0], vb, a.v_row, T, a.dv);
    cp_async_commit();

    const int qrow0 = q0 + warp * 16 + g;
    float L2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int qq = qrow0 + 8 * r;
        L2[r] = qq < T ? Lrow[qq] * MLA_LOG2E : INFINITY;  // rows past T: P = 0
        Dr[r] = qq < T ? Drow[qq] : 0.f;
    }
    float dqa[DQK / 8][4];
    zero_acc<DQK / 8>(dqa);
    for (int j = 0; j <= qt; j++) {
        if (j < qt) {
            const int k1 = (j + 1) * MLA_TILE;
            mtile_load(sK[(j + 1) & 1], kb + (size_t)k1 * a.k_row, a.k_row, T - k1, a.dqk);
            mtile_load(sV[(j + 1) & 1], vb + (size_t)k1 * a.v_row, a.v_row, T - k1, a.dv);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float s[8][4];  // S then P
        zero_acc<8>(s);
        mma_rows_tileT<DQK>(s, sQ, warp * 16, sK[j & 1], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[nt][e] * a.sl2 - L2[e >> 1]);
                if (j == qt) {
                    const int key = j * MLA_TILE + nt * 8 + 2 * t + (e & 1), qq = qrow0 + (e >> 1) * 8;
                    if (key > qq) p = 0.f;
                }
                s[nt][e] = p;
            }
        float dp[8][4];  // dP then dS
        zero_acc<8>(dp);
        mma_rows_tileT<DV>(dp, sdO, warp * 16, sV[j & 1], lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[nt][e] = s[nt][e] * (dp[nt][e] - Dr[e >> 1]);
        mma_p_tile<DQK>(dqa, dp, sK[j & 1], lane);
        __syncthreads();
    }
    store_rows<DQK>(dq + (size_t)b * T * a.q_row + (size_t)h * a.q_head, a.q_row, q0 + warp * 16, T, a.dqk, dqa,
                    a.scale, a.scale, lane);
}

// ---------------------------------------------------------------------------
// launchers

// 0: no tensor-core kernel fits; else the template <64, 64>, <128, 128> or <192, 128>
static int mma_variant(const AttnDev &a) {
    if (a.dqk % 8 || a.dv % 8) return 0;
    if ((a.q_row | a.q_head | a.k_row | a.k_head | a.v_row | a.v_head) % 8) return 0;  // 16-byte rows
    if (a.dqk <= 64 && a.dv <= 64) return 64;
    if (a.dqk <= 128 && a.dv <= 128) return 128;
    if (a.dqk <= 192 && a.dv <= 128) return 192;
    return 0;
}

template <int DQK, int DV>
static void launch_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const AttnDev &a) {
    const dim3 grid((a.T + MLA_TILE - 1) / MLA_TILE, a.B * a.NH);
    launch_kernel(mla_attn_fwd_kernel<DQK, DV>, grid, dim3(MLA_THREADS), fwd_smem<DQK, DV>(), out, lse, q, k, v, a);
}

template <int DQK, int DV>
static void launch_bwd(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const float *D, const AttnDev &a) {
    const dim3 grid((a.T + MLA_TILE - 1) / MLA_TILE, a.B * a.NH);
    if constexpr (DQK + DV <= 128) {
        launch_kernel(mla_attn_dkdv_kernel<DQK, DV, 0>, grid, dim3(MLA_THREADS), dkdv_smem<DQK, DV, 0>(), dk, dv, dout,
                      q, k, v, lse, D, a);
    } else {
        launch_kernel(mla_attn_dkdv_kernel<DQK, DV, 1>, grid, dim3(MLA_THREADS), dkdv_smem<DQK, DV, 1>(), dk, dv, dout,
                      q, k, v, lse, D, a);
        launch_kernel(mla_attn_dkdv_kernel<DQK, DV, 2>, grid, dim3(MLA_THREADS), dkdv_smem<DQK, DV, 2>(), dk, dv, dout,
                      q, k, v, lse, D, a);
    }
    launch_kernel(mla_attn_dq_kernel<DQK, DV>, grid, dim3(MLA_THREADS), dq_smem<DQK, DV>(), dq, dout, q, k, v, lse, D,
                  a);
}

int mla_attn_mma_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const AttnDev &a) {
    if (!is_aligned16(out) || !is_aligned16(q) || !is_aligned16(k) || !is_aligned16(v)) return 0;
    switch (mma_variant(a)) {
        case 64: launch_fwd<64, 64>(out, lse, q, k, v, a); return 1;
        case 128: launch_fwd<128, 128>(out, lse, q, k, v, a); return 1;
        case 192: launch_fwd<192, 128>(out, lse, q, k, v, a); return 1;
        default: return 0;
    }
}

int mla_attn_mma_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                          const bf16 *v, const float *lse, const float *D, const AttnDev &a) {
    const void *ptrs[] = {dq, dk, dv, dout, q, k, v};
    for (const void *p : ptrs)
        if (!is_aligned16(p)) return 0;
    switch (mma_variant(a)) {
        case 64: launch_bwd<64, 64>(dq, dk, dv, dout, q, k, v, lse, D, a); return 1;
        case 128: launch_bwd<128, 128>(dq, dk, dv, dout, q, k, v, lse, D, a); return 1;
        case 192: launch_bwd<192, 128>(dq, dk, dv, dout, q, k, v, lse, D, a); return 1;
        default: return 0;
    }
}
