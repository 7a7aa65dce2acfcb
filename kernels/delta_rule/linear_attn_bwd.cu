// Chunked ELU+1 linear attention backward on CUDA (model/ops/delta_rule/delta_rule.h,
// linear_attn_chunk_backward; docs/delta-rule.md, "Chunked linear-attention backward";
// layouts and structure: kernels/delta_rule/linear_attn.cuh). Recompute mode: the chunk
// states (S_n, z_n) are rebuilt from q, k, v as in the forward. Then, per chunk with
// dn_r = dO_r / den_r, dden_r = -(dO_r . O_r) / den_r, A = (Q^ K^^T) masked and
// P2 = (dn V^T + dden 1^T) masked (c <= r):
//   dQ^ = P2 K^ + dn S_n^T + dden z_n^T          (P2 K^ + dden z_n^T = P K^ + dden z_r^T)
//   dK^ = P2^T Q^ + V dS'^T + 1 dz'^T
//   dV  = K^ dS' + A^T dn
//   dS_n = dS' + Q^^T dn,  dz_n = dz' + sum_r q^_r dden_r     (the reverse scan)
//   dq = scale dQ^ phi'(q),  dk = dK^ phi'(k)
// with dS', dz' the gradient of the state leaving the chunk. dO_r . O_r needs whole rows, so a
// first kernel per (chunk, head) computes den, dden, A and P2 over all channel tiles:
//   dO_r . N_r = (Q^ S_n)_r . dO_r + sum_{c<=r} A[r][c] (dO_r . v_c),  dden_r = -(dO_r . N_r) / den_r^2.
#include "kernels/delta_rule/linear_attn.cuh"

// den, dden, A and P2 of one (chunk, head), into stats (linear_attn.cuh)
__global__ void la_bwd_stats_kernel(float *stats, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                                    const float *states, float scale, int normalize, int T, int H, int K, int V,
                                    const int *offsets, int N) {
    int s, rows, n;
    size_t tok0;
    if (!chunk_of_slot(offsets, N, T, LA_C, blockIdx.x, &s, &tok0, &rows, &n)) return;
    const int h = blockIdx.y, tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const size_t unit = (size_t)blockIdx.x * H + h;
    const float *Sn = states + unit * la_state_stride(K, V), *zn = Sn + (size_t)K * V;
    DYNAMIC_SMEM(float, sm);
    float *Qt = sm, *Kt = Qt + LA_TILE_FLOATS, *St = Kt + LA_TILE_FLOATS, *Dt = St + LA_TILE_FLOATS;
    float *Vt = Dt + LA_TILE_FLOATS, *At = Vt + LA_TILE_FLOATS, *zt = At + LA_TILE_FLOATS, *den = zt + LA_TILE;
    // A and the normaliser over the key tiles
    la_scores(Qt, Kt, At, zt, den, q, k, zn, scale, normalize, tok0, rows, h, H, K, [](int, int) {}, [](int) {});
    // D[r][c] = dO_r . v_c over the value tiles
    float accD[4][4], qsdo[4] = {0.f, 0.f, 0.f, 0.f};
    la_zero(accD);
    for (int v0 = 0; v0 < V; v0 += LA_TILE) {
        const int vw = min(LA_TILE, V - v0);
        __syncthreads();  // the previous tiles' readers are done
        la_load(Dt, rows, vw, [&](int r, int c) { return la_at(dout, tok0, r, h, H, V, v0 + c); });
        la_load(Vt, rows, vw, [&](int r, int c) { return la_at(v, tok0, r, h, H, V, v0 + c); });
        __syncthreads();
        la_mm(accD, vw, [&](int r, int p) { return Dt[r * LA_LD + p]; }, [&](int p, int c) { return Vt[c * LA_LD + p]; });
    }
    // (Q^ S_n)_r . dO_r (normalised only: dden), tile by tile; the barriers are outside the
    // branch on normalize (one path to each)
    const int vend = normalize ? V : 0;
    for (int v0 = 0; v0 < vend; v0 += LA_TILE) {
        const int vw = min(LA_TILE, V - v0);
        float accQS[4][4];
        la_zero(accQS);
        for (int k0 = 0; k0 < K; k0 += LA_TILE) {
            const int kw = min(LA_TILE, K - k0);
            __syncthreads();
            la_load(Qt, rows, kw, [&](int r, int c) { return scale * la_phi(la_at(q, tok0, r, h, H, K, k0 + c)); });
            la_load(St, kw, vw, [&](int i, int j) { return Sn[(size_t)(k0 + i) * V + v0 + j]; });
            la_load(Dt, rows, vw, [&](int r, int c) { return la_at(dout, tok0, r, h, H, V, v0 + c); });
            __syncthreads();
            la_mm(accQS, kw, [&](int r, int p) { return Qt[r * LA_LD + p]; }, [&](int p, int j) { return St[p * LA_LD + j]; });
        }
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) qsdo[a] += accQS[a][b] * Dt[(ty + 16 * a) * LA_LD + tx + 16 * b];
    }
    float *A = stats + unit * la_stats_stride(), *P2 = A + LA_C * LA_C, *den_out = P2 + LA_C * LA_C;
    float *dden_out = den_out + LA_C;
    for (int a = 0; a < 4; a++) {
        const int r = ty + 16 * a;
        float part = qsdo[a];
        for (int b = 0; b < 4; b++) part += At[r * LA_LD + tx + 16 * b] * accD[a][b];
        const float dOn = la_row_sum(part);
        const float dd = normalize ? -dOn / (den[r] * den[r]) : 0.f;
        for (int b = 0; b < 4; b++) {
            const int c = tx + 16 * b;
            const int in = c <= r && r < rows;
            A[r * LA_C + c] = At[r * LA_LD + c];
            P2[r * LA_C + c] = in ? accD[a][b] / den[r] + dd : 0.f;
        }
        if (tx == 0) {
            den_out[r] = den[r];
            dden_out[r] = dd;
        }
    }
}

// dq, dk of one (chunk, head, key tile)
__global__ void la_bwd_dqk_kernel(bf16 *dq, bf16 *dk, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                                  const float *states, const float *dstates, const float *stats, float scale,
                                  int normalize, int T, int H, int K, int V, const int *offsets, int N) {
    int s, rows, n;
    size_t tok0;
    if (!chunk_of_slot(offsets, N, T, LA_C, blockIdx.x, &s, &tok0, &rows, &n)) return;
    const int h = blockIdx.y, k0 = blockIdx.z * LA_TILE, kw = min(LA_TILE, K - k0);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const size_t unit = (size_t)blockIdx.x * H + h, KV = (size_t)K * V;
    const float *Sn = states + unit * la_state_stride(K, V), *dSn = dstates + unit * la_state_stride(K, V);
    const float *P2 = stats + unit * la_stats_stride() + LA_C * LA_C, *den = P2 + LA_C * LA_C, *dden = den + LA_C;
    DYNAMIC_SMEM(float, sm);
    float *Pt = sm, *Qt = Pt + LA_TILE_FLOATS, *Kt = Qt + LA_TILE_FLOATS, *Dn = Kt + LA_TILE_FLOATS;
    float *Vt = Dn + LA_TILE_FLOATS, *St = Vt + LA_TILE_FLOATS, *Gt = St + LA_TILE_FLOATS;
    la_load(Pt, LA_C, LA_C, [&](int r, int c) { return P2[r * LA_C + c]; });
    la_load(Qt, rows, kw, [&](int r, int c) { return scale * la_phi(la_at(q, tok0, r, h, H, K, k0 + c)); });
    la_load(Kt, rows, kw, [&](int r, int c) { return la_phi(la_at(k, tok0, r, h, H, K, k0 + c)); });
    __syncthreads();
    float accQ[4][4], accK[4][4];
    la_zero(accQ);
    la_zero(accK);
    la_mm(accQ, rows, [&](int r, int p) { return Pt[r * LA_LD + p]; }, [&](int p, int i) { return Kt[p * LA_LD + i]; });
    la_mm(accK, rows, [&](int c, int p) { return Pt[p * LA_LD + c]; }, [&](int p, int i) { return Qt[p * LA_LD + i]; });
    for (int v0 = 0; v0 < V; v0 += LA_TILE) {
        const int vw = min(LA_TILE, V - v0);
        __syncthreads();  // the previous tiles' readers are done
        la_load(Dn, rows, vw, [&](int r, int c) { return la_at(dout, tok0, r, h, H, V, v0 + c) / den[r]; });
        la_load(Vt, rows, vw, [&](int r, int c) { return la_at(v, tok0, r, h, H, V, v0 + c); });
        la_load(St, kw, vw, [&](int i, int j) { return Sn[(size_t)(k0 + i) * V + v0 + j]; });
        la_load(Gt, kw, vw, [&](int i, int j) { return dSn[(size_t)(k0 + i) * V + v0 + j]; });
        __syncthreads();
        la_mm(accQ, vw, [&](int r, int p) { return Dn[r * LA_LD + p]; }, [&](int p, int i) { return St[i * LA_LD + p]; });
        la_mm(accK, vw, [&](int c, int p) { return Vt[c * LA_LD + p]; }, [&](int p, int i) { return Gt[i * LA_LD + p]; });
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int r = ty + 16 * a, i = tx + 16 * b;
            if (r >= rows || i >= kw) continue;
            float gq = accQ[a][b], gk = accK[a][b];
            if (normalize) {
                gq += dden[r] * Sn[KV + k0 + i];
                gk += dSn[KV + k0 + i];
            }
            const size_t idx = ((tok0 + r) * H + h) * (size_t)K + k0 + i;
            dq[idx] = __float2bfloat16(scale * gq * la_dphi(__bfloat162float(q[idx])));
            dk[idx] = __float2bfloat16(gk * la_dphi(__bfloat162float(k[idx])));
        }
}

// dv of one (chunk, head, value tile)
__global__ void la_bwd_dv_kernel(bf16 *dv, const bf16 *k, const bf16 *dout, const float *dstates, const float *stats,
                                 int T, int H, int K, int V, const int *offsets, int N) {
    int s, rows, n;
    size_t tok0;
    if (!chunk_of_slot(offsets, N, T, LA_C, blockIdx.x, &s, &tok0, &rows, &n)) return;
    const int h = blockIdx.y, v0 = blockIdx.z * LA_TILE, vw = min(LA_TILE, V - v0);
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const size_t unit = (size_t)blockIdx.x * H + h;
    const float *dSn = dstates + unit * la_state_stride(K, V);
    const float *A = stats + unit * la_stats_stride(), *den = A + 2 * LA_C * LA_C;
    DYNAMIC_SMEM(float, sm);
    float *At = sm, *Dn = At + LA_TILE_FLOATS, *Kt = Dn + LA_TILE_FLOATS, *Gt = Kt + LA_TILE_FLOATS;
    la_load(At, LA_C, LA_C, [&](int r, int c) { return A[r * LA_C + c]; });
    la_load(Dn, rows, vw, [&](int r, int c) { return la_at(dout, tok0, r, h, H, V, v0 + c) / den[r]; });
    __syncthreads();
    float acc[4][4];
    la_zero(acc);
    la_mm(acc, rows, [&](int c, int p) { return At[p * LA_LD + c]; }, [&](int p, int j) { return Dn[p * LA_LD + j]; });
    for (int k0 = 0; k0 < K; k0 += LA_TILE) {
        const int kw = min(LA_TILE, K - k0);
        __syncthreads();
        la_load(Kt, rows, kw, [&](int r, int c) { return la_phi(la_at(k, tok0, r, h, H, K, k0 + c)); });
        la_load(Gt, kw, vw, [&](int i, int j) { return dSn[(size_t)(k0 + i) * V + v0 + j]; });
        __syncthreads();
        la_mm(acc, kw, [&](int c, int p) { return Kt[c * LA_LD + p]; }, [&](int p, int j) { return Gt[p * LA_LD + j]; });
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int c = ty + 16 * a, j = tx + 16 * b;
            if (c < rows && j < vw) dv[((tok0 + c) * H + h) * (size_t)V + v0 + j] = __float2bfloat16(acc[a][b]);
        }
}

extern "C" void cuda_linear_attn_chunk_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                                const real *dST, const real *dzT, const real *q, const real *k,
                                                const real *v, const real *S0, const real *z0, real scale,
                                                int normalize, int B, int T, int H, int K, int V,
                                                const int *offsets, int nseq, int chunk, void *workspace) {
    PROFILE("linear_attn_bwd");
    const int N = la_check("cuda_linear_attn_chunk_backward", B, T, H, K, V, offsets, nseq, chunk, workspace);
    const size_t rows = (size_t)B * T;
    if (rows == 0) {  // no tokens: only the scan runs (dS0 = dST, dz0 = dzT, or zeros)
        la_chunk_states(1, NULL, (float *)dS0, normalize ? (float *)dz0 : NULL, (const float *)dST,
                        normalize ? (const float *)dzT : NULL, NULL, NULL, NULL, (float)scale, normalize, B, T, H, K,
                        V, offsets, N);
        return;
    }
    const size_t units = chunk_slots(rows, N, LA_C) * (size_t)H;
    float *states = (float *)workspace, *dstates = states + units * la_state_stride(K, V);
    float *stats = dstates + units * la_state_stride(K, V);
    const bf16 *qb = (const bf16 *)q, *kb = (const bf16 *)k, *vb = (const bf16 *)v, *dob = (const bf16 *)dout;
    const dim3 block(LA_THREADS);
    const unsigned slots = (unsigned)chunk_slots(rows, N, LA_C);
    // the entering states (S_n, z_n), as in the forward
    la_chunk_states(0, states, NULL, NULL, (const float *)S0, normalize ? (const float *)z0 : NULL, kb, vb, NULL, 1.f,
                    normalize, B, T, H, K, V, offsets, N);
    launch_kernel(la_bwd_stats_kernel, dim3(slots, H), block, (6 * LA_TILE_FLOATS + 2 * LA_TILE) * sizeof(float),
                  stats, qb, kb, vb, dob, (const float *)states, (float)scale, normalize, T, H, K, V, offsets, N);
    // the gradients of the states leaving the chunks (dS', dz') and of the initial state
    la_chunk_states(1, dstates, (float *)dS0, normalize ? (float *)dz0 : NULL, (const float *)dST,
                    normalize ? (const float *)dzT : NULL, qb, dob, stats, (float)scale, normalize, B, T, H, K, V,
                    offsets, N);
    launch_kernel(la_bwd_dqk_kernel, dim3(slots, H, la_tiles(K)), block, 7 * LA_TILE_FLOATS * sizeof(float),
                  (bf16 *)dq, (bf16 *)dk, qb, kb, vb, dob, (const float *)states, (const float *)dstates,
                  (const float *)stats, (float)scale, normalize, T, H, K, V, offsets, N);
    launch_kernel(la_bwd_dv_kernel, dim3(slots, H, la_tiles(V)), block, 4 * LA_TILE_FLOATS * sizeof(float),
                  (bf16 *)dv, kb, dob, (const float *)dstates, (const float *)stats, T, H, K, V, offsets, N);
}
