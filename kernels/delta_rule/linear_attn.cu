// Chunked ELU+1 linear attention on CUDA: workspace, the chunk states (shared with the
// backward), the forward and the decode step (model/ops/delta_rule/delta_rule.h,
// linear_attn_*; layouts and structure: kernels/delta_rule/linear_attn.cuh). Per chunk with
// entering state (S_n, z_n), q^ = scale phi(q), k^ = phi(k), A = (Q^ K^^T) masked c <= r:
//   O = (Q^ S_n + A V) / den,  den_r = q^_r . z_n + sum_{c<=r} A[r][c] + eps  (else 1)
//   S_{n+1} = S_n + K^^T V,    z_{n+1} = z_n + sum_r k^_r
// (den_r = q^_r . z_r with z_r = z_n + sum_{c<=r} k^_c, docs/delta-rule.md, "Chunked linear
// attention"). Three launches: the chunks' own K^T V (chunk-parallel), the scan over chunks
// (sequential per sequence), the outputs (chunk-parallel).
#include "kernels/delta_rule/linear_attn.cuh"
#include "kernels/delta_rule/workspace.cuh"

// the chunk sizes of the entries: N from nseq (varlen) or B, whichever is larger, so that a
// size asked with either stays valid
static size_t la_slots(int B, int T, int nseq) {
    const int N = nseq > B ? nseq : B;
    return chunk_slots((size_t)B * T, N, LA_C);
}

size_t linear_attn_workspace_bytes(int backward, int B, int T, int H, int K, int V, int nseq, int chunk) {
    if (chunk != LA_C) die("linear attention: chunk_size %d: the CUDA delta-rule kernels take %d", chunk, LA_C);
    const size_t units = la_slots(B, T, nseq) * (size_t)H;
    size_t floats = units * la_state_stride(K, V);
    if (backward) floats = 2 * floats + units * la_stats_stride();
    return floats * sizeof(float);
}

int la_check(const char *op, int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
             const void *workspace) {
    if (chunk != LA_C) die("%s: chunk_size %d: the CUDA delta-rule kernels take %d", op, chunk, LA_C);
    if (K < 1 || V < 1 || K > LA_MAX_DIM || V > LA_MAX_DIM)
        die("%s: K=%d V=%d: the CUDA linear-attention kernels take 1..%d", op, K, V, LA_MAX_DIM);
    if (B < 0 || T < 0 || H < 1) die("%s: bad B=%d T=%d H=%d", op, B, T, H);
    if (offsets && (B != 1 || nseq < 1)) die("%s: offsets need B == 1 and nseq >= 1 (B=%d nseq=%d)", op, B, nseq);
    if (!workspace && (size_t)B * T > 0) die("%s: no workspace", op);
    return offsets ? nseq : B;
}

// A chunk's own state contribution, one 64 x 64 tile (kt, vt) per block:
//   out[i][j] = sum_r L[r][i] R[r][j],  out_z[i] = sum_r L[r][i] w_r   (vt == 0 blocks)
// forward: L = k^, R = v, w = 1; backward: L = q^, R = dn = dout / den, w = dden.
template <bool BWD>
__global__ void la_outer_kernel(float *out, const bf16 *a_in, const bf16 *r_in, const float *stats, float scale,
                                int normalize, int T, int H, int K, int V, const int *offsets, int N) {
    int s, rows, n;
    size_t tok0;
    if (!chunk_of_slot(offsets, N, T, LA_C, blockIdx.x, &s, &tok0, &rows, &n)) return;
    const int h = blockIdx.y, nvt = la_tiles(V), k0 = (blockIdx.z / nvt) * LA_TILE, v0 = (blockIdx.z % nvt) * LA_TILE;
    const int kw = min(LA_TILE, K - k0), vw = min(LA_TILE, V - v0);
    const size_t unit = (size_t)blockIdx.x * H + h;
    const float *st = BWD ? stats + unit * la_stats_stride() : NULL;
    const float *den = BWD ? st + 2 * LA_C * LA_C : NULL, *dden = BWD ? den + LA_C : NULL;
    DYNAMIC_SMEM(float, sm);
    float *Lt = sm, *Rt = sm + LA_TILE_FLOATS;
    la_load(Lt, rows, kw, [&](int r, int c) {
        const float x = la_at(a_in, tok0, r, h, H, K, k0 + c);
        return BWD ? scale * la_phi(x) : la_phi(x);
    });
    la_load(Rt, rows, vw, [&](int r, int c) {
        const float x = la_at(r_in, tok0, r, h, H, V, v0 + c);
        return BWD ? x / den[r] : x;
    });
    __syncthreads();
    float acc[4][4];
    la_zero(acc);
    la_mm(acc, rows, [&](int i, int p) { return Lt[p * LA_LD + i]; }, [&](int p, int j) { return Rt[p * LA_LD + j]; });
    float *o = out + unit * la_state_stride(K, V);
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int i = ty + 16 * a, j = tx + 16 * b;
            if (i < kw && j < vw) o[(size_t)(k0 + i) * V + v0 + j] = acc[a][b];
        }
    if (normalize && v0 == 0 && (int)threadIdx.x < kw) {
        float z = 0.f;
        for (int r = 0; r < rows; r++) z += Lt[r * LA_LD + threadIdx.x] * (BWD ? dden[r] : 1.f);
        o[(size_t)K * V + k0 + threadIdx.x] = z;
    }
}

// One thread per (sequence, head, state element e < KV + K) walks the sequence's chunks,
// forward (rev 0) or backward (rev 1), replacing each chunk's contribution with the running
// sum before it: the state entering the chunk, or the gradient of the state leaving it.
__global__ void la_scan_kernel(float *ws, float *fin, float *zfin, const float *init, const float *zinit, int rev,
                               int normalize, int T, int H, int K, int V, const int *offsets) {
    const size_t KV = (size_t)K * V, e = (size_t)blockIdx.z * blockDim.x + threadIdx.x;
    if (e >= KV + (normalize ? (size_t)K : 0)) return;
    const int s = blockIdx.x, h = blockIdx.y;
    const size_t bos = seq_bos(offsets, T, s), len = seq_bos(offsets, T, s + 1) - bos;
    const size_t nch = (len + LA_C - 1) / LA_C, f = bos / LA_C + s, task = (size_t)s * H + h;
    const int is_z = e >= KV;
    float acc = is_z ? (zinit ? zinit[task * K + (e - KV)] : 0.f) : (init ? init[task * KV + e] : 0.f);
    for (size_t it = 0; it < nch; it++) {
        const size_t n = rev ? nch - 1 - it : it;
        float *p = ws + ((f + n) * H + h) * la_state_stride(K, V) + e;
        const float t = *p;
        *p = acc;
        acc += t;
    }
    if (is_z) {
        if (zfin) zfin[task * K + (e - KV)] = acc;
    } else if (fin) {
        fin[task * KV + e] = acc;
    }
}

void la_chunk_states(int bwd, float *states, float *fin, float *zfin, const float *init, const float *zinit,
                     const bf16 *a, const bf16 *r, const float *stats, float scale, int normalize, int B, int T,
                     int H, int K, int V, const int *offsets, int N) {
    const size_t rows = (size_t)B * T;
    if (rows > 0) {
        const dim3 grid((unsigned)chunk_slots(rows, N, LA_C), H, la_tiles(K) * la_tiles(V));
        const size_t smem = 2 * LA_TILE_FLOATS * sizeof(float);
        if (bwd)
            launch_kernel(la_outer_kernel<true>, grid, dim3(LA_THREADS), smem, states, a, r, stats, scale, normalize,
                          T, H, K, V, offsets, N);
        else
            launch_kernel(la_outer_kernel<false>, grid, dim3(LA_THREADS), smem, states, a, r, stats, scale,
                          normalize, T, H, K, V, offsets, N);
    }
    if (N > 0) {
        const size_t elems = la_state_stride(K, V);
        launch_kernel(la_scan_kernel, dim3(N, H, (unsigned)((elems + 255) / 256)), dim3(256), 0, states, fin, zfin,
                      init, zinit, bwd, normalize, T, H, K, V, offsets);
    }
}

// The outputs of one (chunk, head, value tile): A and q^.z_n over all key tiles, then
// O = (Q^ S_n + A V) / den.
__global__ void la_fwd_out_kernel(bf16 *o, const bf16 *q, const bf16 *k, const bf16 *v, const float *states,
                                  float scale, int normalize, int T, int H, int K, int V, const int *offsets, int N) {
    int s, rows, n;
    size_t tok0;
    if (!chunk_of_slot(offsets, N, T, LA_C, blockIdx.x, &s, &tok0, &rows, &n)) return;
    const int h = blockIdx.y, v0 = blockIdx.z * LA_TILE, vw = min(LA_TILE, V - v0);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const float *Sn = states + ((size_t)blockIdx.x * H + h) * la_state_stride(K, V), *zn = Sn + (size_t)K * V;
    DYNAMIC_SMEM(float, sm);
    float *Qt = sm, *Kt = Qt + LA_TILE_FLOATS, *St = Kt + LA_TILE_FLOATS, *Vt = St + LA_TILE_FLOATS;
    float *At = Vt + LA_TILE_FLOATS, *zt = At + LA_TILE_FLOATS, *den = zt + LA_TILE;
    float accO[4][4];
    la_zero(accO);
    la_scores(Qt, Kt, At, zt, den, q, k, zn, scale, normalize, tok0, rows, h, H, K,
              [&](int k0, int kw) { la_load(St, kw, vw, [&](int i, int j) { return Sn[(size_t)(k0 + i) * V + v0 + j]; }); },
              [&](int kw) {
                  la_mm(accO, kw, [&](int r, int p) { return Qt[r * LA_LD + p]; },
                        [&](int p, int j) { return St[p * LA_LD + j]; });
              });
    la_load(Vt, rows, vw, [&](int r, int c) { return la_at(v, tok0, r, h, H, V, v0 + c); });
    __syncthreads();
    la_mm(accO, rows, [&](int r, int p) { return At[r * LA_LD + p]; }, [&](int p, int j) { return Vt[p * LA_LD + j]; });
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int r = ty + 16 * a, j = tx + 16 * b;
            if (r < rows && j < vw)
                o[((tok0 + r) * H + h) * (size_t)V + v0 + j] = __float2bfloat16(accO[a][b] / den[r]);
        }
}

extern "C" void cuda_linear_attn_chunk_forward(real *o, real *ST, real *zT, const real *q, const real *k,
                                               const real *v, const real *S0, const real *z0, real scale,
                                               int normalize, int B, int T, int H, int K, int V, const int *offsets,
                                               int nseq, int chunk, void *workspace) {
    PROFILE("linear_attn_fwd");
    const int N = la_check("cuda_linear_attn_chunk_forward", B, T, H, K, V, offsets, nseq, chunk, workspace);
    float *states = (float *)workspace;  // may be NULL without rows: then only the scan runs
    la_chunk_states(0, states, (float *)ST, normalize ? (float *)zT : NULL, (const float *)S0,
                    normalize ? (const float *)z0 : NULL, (const bf16 *)k, (const bf16 *)v, NULL, 1.f, normalize, B,
                    T, H, K, V, offsets, N);
    const size_t rows = (size_t)B * T;
    if (rows == 0) return;
    const size_t smem = (5 * LA_TILE_FLOATS + 2 * LA_TILE) * sizeof(float);
    launch_kernel(la_fwd_out_kernel, dim3((unsigned)chunk_slots(rows, N, LA_C), H, la_tiles(V)), dim3(LA_THREADS),
                  smem, (bf16 *)o, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const float *)states,
                  (float)scale, normalize, T, H, K, V, offsets, N);
}

// ---- decode: one token per (sequence, head), one block each --------------------------------
//   z += k^;  den = q^.z + eps (else 1);  S += k^ v^T;  o = S^T q^ / den
#define LA_STEP_THREADS 128
__global__ void la_step_kernel(bf16 *o, float *S, float *z, const bf16 *q, const bf16 *k, const bf16 *v, float scale,
                               int normalize, int K, int V) {
    __shared__ float qh[LA_MAX_DIM], kh[LA_MAX_DIM], zz[LA_MAX_DIM];
    const size_t task = blockIdx.x;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        qh[i] = scale * la_phi(__bfloat162float(q[task * K + i]));
        kh[i] = la_phi(__bfloat162float(k[task * K + i]));
        if (normalize) {
            const float zi = z[task * K + i] + kh[i];
            z[task * K + i] = zi;
            zz[i] = zi;
        }
    }
    __syncthreads();
    float den = 1.f;
    if (normalize) {
        den = LA_EPS;
        for (int i = 0; i < K; i++) den += qh[i] * zz[i];
    }
    float *St = S + task * K * V;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float vj = __bfloat162float(v[task * V + j]);
        float num = 0.f;
        for (int i = 0; i < K; i++) {
            const float sij = St[(size_t)i * V + j] + kh[i] * vj;
            St[(size_t)i * V + j] = sij;
            num += qh[i] * sij;
        }
        o[task * V + j] = __float2bfloat16(num / den);
    }
}

extern "C" void cuda_linear_attn_step(real *o, real *S, real *z, const real *q, const real *k, const real *v,
                                      real scale, int normalize, int N, int H, int K, int V) {
    PROFILE("linear_attn_step");
    if (K < 1 || V < 1 || K > LA_MAX_DIM || V > LA_MAX_DIM)
        die("cuda_linear_attn_step: K=%d V=%d: the CUDA linear-attention kernels take 1..%d", K, V, LA_MAX_DIM);
    if (N < 1 || H < 1) return;
    launch_kernel(la_step_kernel, dim3((unsigned)((size_t)N * H)), dim3(LA_STEP_THREADS), 0, (bf16 *)o, (float *)S,
                  normalize ? (float *)z : (float *)NULL, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                  (float)scale, normalize, K, V);
}
