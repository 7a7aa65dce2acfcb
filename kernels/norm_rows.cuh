// The row-normalisation kernels shared by LayerNorm (kernels/core/layernorm.cu) and
// RMSNorm (kernels/norm_glu/rmsnorm.cu); model/ops/core/layernorm.c and
// model/ops/norm_glu/rmsnorm.c give the equations. bf16 rows with fp32 statistics.
// RMSNorm is LayerNorm with mean 0 and no shift, so both share the kernels (template
// flag RMS):
//   forward   xhat = (x - mu) * rstd,  y = xhat * w + b
//   backward  g = dy * w,  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (RMS: no mean(g))
//             dw += sum_rows dy * xhat,  db += sum_rows dy
// One warp per row. Fast path when C is a multiple of 256 up to 1024 (8 channels per
// lane per 256, kept in registers); otherwise a generic strided path.
// dw/db are deterministic: fixed row chunks per block (depending on N only), partial
// sums in fixed order per warp, warps added in order, then chunks added in order.
#ifndef HYBRID_KERNELS_NORM_ROWS_CUH
#define HYBRID_KERNELS_NORM_ROWS_CUH

#include "kernels/common.cuh"

#define NORM_ROWS_PER_CHUNK 64  // 4 warps of 16 rows: ~155 registers, 3 blocks per SM at C = 768
#define NORM_MAX_CHUNKS 1024

// ADD: the input is res = inp + inp2, written (bf16) and normalized as rounded.
template <int NV, bool RMS, bool ADD = false>
__global__ void norm_fwd_vec_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w, const bf16 *b,
                                    int N, int C, float eps, const bf16 *inp2 = NULL, bf16 *res = NULL) {
    int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C;
    float v[NV][8];
#pragma unroll
    for (int j = 0; j < NV; j++) load8(x + (j * 32 + lane) * 8, v[j]);
    if (ADD) {
#pragma unroll
        for (int j = 0; j < NV; j++) {
            float y[8];
            load8(inp2 + (size_t)row * C + (j * 32 + lane) * 8, y);
#pragma unroll
            for (int k = 0; k < 8; k++) v[j][k] = __bfloat162float(__float2bfloat16(v[j][k] + y[k]));
            store8(res + (size_t)row * C + (j * 32 + lane) * 8, v[j]);  // exact: already bf16 values
        }
    }
    float mu = 0.f;
    if (!RMS) {
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < NV; j++)
#pragma unroll
            for (int k = 0; k < 8; k++) s += v[j][k];
        mu = warp_sum(s) / C;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float d = v[j][k] - mu;
            ss += d * d;
        }
    float r = rsqrtf(warp_sum(ss) / C + eps);
    bf16 *y = out + (size_t)row * C;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int c = (j * 32 + lane) * 8;
        float wv[8], bv[8], o[8];
        load8(w + c, wv);
        if (b) load8(b + c, bv);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = (v[j][k] - mu) * r * wv[k] + (b ? bv[k] : 0.f);
        store8(y + c, o);
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        rstd[row] = r;
    }
}

template <bool RMS>
__global__ void norm_fwd_generic_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                        const bf16 *b, int N, int C, float eps) {
    int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C;
    float mu = 0.f;
    if (!RMS) {
        float s = 0.f;
        for (int c = lane; c < C; c += 32) s += __bfloat162float(x[c]);
        mu = warp_sum(s) / C;
    }
    float ss = 0.f;
    for (int c = lane; c < C; c += 32) {
        float d = __bfloat162float(x[c]) - mu;
        ss += d * d;
    }
    float r = rsqrtf(warp_sum(ss) / C + eps);
    bf16 *y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float o = (__bfloat162float(x[c]) - mu) * r * __bfloat162float(w[c]) + (b ? __bfloat162float(b[c]) : 0.f);
        y[c] = __float2bfloat16(o);
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        rstd[row] = r;
    }
}

// Input gradient (written) and this chunk's dw/db partial sums: partial[chunk][0..C) = dw,
// [C..2C) = db. Warps take the chunk's rows round-robin, each in order.
// ACC: dinp += the input gradient (rounded once, after the add)
template <int NV, bool RMS, bool ACC = false>
__global__ void norm_bwd_vec_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *w,
                                    const float *mean, const float *rstd, int N, int C, int rows_per_chunk) {
    DYNAMIC_SMEM(float, sh);  // 2C
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int row0 = blockIdx.x * rows_per_chunk, row1 = min(row0 + rows_per_chunk, N);
    float wv[NV][8], dwa[NV][8], dba[NV][8];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        load8(w + (j * 32 + lane) * 8, wv[j]);
#pragma unroll
        for (int k = 0; k < 8; k++) dwa[j][k] = dba[j][k] = 0.f;
    }
    for (int row = row0 + warp; row < row1; row += nw) {
        float dy[NV][8], xh[NV][8];
        const bf16 *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
        float mu = RMS ? 0.f : mean[row], r = rstd[row];
#pragma unroll
        for (int j = 0; j < NV; j++) {
            load8(d + (j * 32 + lane) * 8, dy[j]);
            load8(x + (j * 32 + lane) * 8, xh[j]);
        }
        float sg = 0.f, sgx = 0.f;
#pragma unroll
        for (int j = 0; j < NV; j++)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                xh[j][k] = (xh[j][k] - mu) * r;
                float g = dy[j][k] * wv[j][k];
                sg += g;
                sgx += g * xh[j][k];
                dwa[j][k] += dy[j][k] * xh[j][k];
                dba[j][k] += dy[j][k];
            }
        float mg = RMS ? 0.f : warp_sum(sg) / C, mgx = warp_sum(sgx) / C;
        bf16 *dx = dinp + (size_t)row * C;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            float o[8], prev[8];
            if (ACC) load8(dx + (j * 32 + lane) * 8, prev);
#pragma unroll
            for (int k = 0; k < 8; k++) o[k] = r * (dy[j][k] * wv[j][k] - mg - xh[j][k] * mgx) + (ACC ? prev[k] : 0.f);
            store8(dx + (j * 32 + lane) * 8, o);
        }
    }
    // add the warps' partials in warp order
    for (int wi = 0; wi < nw; wi++) {
        if (warp == wi) {
#pragma unroll
            for (int j = 0; j < NV; j++)
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    int c = (j * 32 + lane) * 8 + k;
                    sh[c] = wi ? sh[c] + dwa[j][k] : dwa[j][k];
                    sh[C + c] = wi ? sh[C + c] + dba[j][k] : dba[j][k];
                }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) partial[(size_t)blockIdx.x * 2 * C + i] = sh[i];
}

// Generic input gradient: one warp per row, strided.
template <bool RMS, bool ACC = false>
__global__ void norm_bwd_dx_generic_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w,
                                           const float *mean, const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float mu = RMS ? 0.f : mean[row], r = rstd[row];
    float sg = 0.f, sgx = 0.f;
    for (int c = lane; c < C; c += 32) {
        float g = __bfloat162float(d[c]) * __bfloat162float(w[c]);
        sg += g;
        sgx += g * (__bfloat162float(x[c]) - mu) * r;
    }
    float mg = RMS ? 0.f : warp_sum(sg) / C, mgx = warp_sum(sgx) / C;
    bf16 *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float g = __bfloat162float(d[c]) * __bfloat162float(w[c]);
        float xh = (__bfloat162float(x[c]) - mu) * r;
        dx[c] = __float2bfloat16(r * (g - mg - xh * mgx) + (ACC ? __bfloat162float(dx[c]) : 0.f));
    }
}

// Generic dw/db partials: one thread per channel, the chunk's rows in order.
template <bool RMS>
__global__ void norm_bwd_dw_generic_kernel(float *partial, const bf16 *dout, const bf16 *inp, const float *mean,
                                           const float *rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int row0 = blockIdx.y * rows_per_chunk, row1 = min(row0 + rows_per_chunk, N);
    float sw = 0.f, sb = 0.f;
    for (int row = row0; row < row1; row++) {
        float dy = __bfloat162float(dout[(size_t)row * C + c]);
        float mu = RMS ? 0.f : mean[row];
        sw += dy * (__bfloat162float(inp[(size_t)row * C + c]) - mu) * rstd[row];
        sb += dy;
    }
    partial[(size_t)blockIdx.y * 2 * C + c] = sw;
    partial[(size_t)blockIdx.y * 2 * C + C + c] = sb;
}

// dw[c] += sum over chunks of partial[chunk][c]; db likewise (db may be NULL).
// Block (32, 8): 32 columns; row lane y adds chunks y, y + 8, ... in order, then the 8
// lane sums are added in order (a fixed order: deterministic).
static __global__ void norm_dw_reduce_kernel(bf16 *dw, bf16 *db, const float *partial, int chunks, int C) {
    __shared__ float sh[8][33];
    int i = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (i < 2 * C)
        for (int k = threadIdx.y; k < chunks; k += 8) s += partial[(size_t)k * 2 * C + i];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y || i >= 2 * C) return;
    bf16 *dst = i < C ? dw + i : (db ? db + (i - C) : NULL);
    if (!dst) return;
    s = 0.f;
    for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
    *dst = __float2bfloat16(__bfloat162float(*dst) + s);
}

template <bool RMS>
static void norm_forward(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w, const bf16 *b, int N,
                         int C, float eps) {
    if (N <= 0) return;
    const int threads = 256, rows_per_block = threads / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    int vec = C % 256 == 0 && C <= 1024 && is_aligned16(out) && is_aligned16(inp) && is_aligned16(w) &&
              (!b || is_aligned16(b));
    if (vec) {
        switch (C / 256) {
        case 1: launch_kernel(norm_fwd_vec_kernel<1, RMS>, grid, threads, 0, out, mean, rstd, inp, w, b, N, C, eps, (const bf16 *)NULL, (bf16 *)NULL); break;
        case 2: launch_kernel(norm_fwd_vec_kernel<2, RMS>, grid, threads, 0, out, mean, rstd, inp, w, b, N, C, eps, (const bf16 *)NULL, (bf16 *)NULL); break;
        case 3: launch_kernel(norm_fwd_vec_kernel<3, RMS>, grid, threads, 0, out, mean, rstd, inp, w, b, N, C, eps, (const bf16 *)NULL, (bf16 *)NULL); break;
        default: launch_kernel(norm_fwd_vec_kernel<4, RMS>, grid, threads, 0, out, mean, rstd, inp, w, b, N, C, eps, (const bf16 *)NULL, (bf16 *)NULL); break;
        }
    } else {
        launch_kernel(norm_fwd_generic_kernel<RMS>, grid, threads, 0, out, mean, rstd, inp, w, b, N, C, eps);
    }
}

// res = a + b (bf16, written), then the norm of res as stored: one pass where the
// vectorized kernel applies, else the separate add and norm (the same results).
template <bool RMS>
static void norm_add_forward(bf16 *res, bf16 *out, float *mean, float *rstd, const bf16 *a, const bf16 *b,
                             const bf16 *w, const bf16 *bias, int N, int C, float eps) {
    if (N <= 0) return;
    const int vec = C % 256 == 0 && C <= 1024 && is_aligned16(out) && is_aligned16(a) && is_aligned16(b) &&
                    is_aligned16(res) && is_aligned16(w) && (!bias || is_aligned16(bias));
    if (!vec) {  // the separate ops
        cuda_add_forward((real *)res, (const real *)a, (const real *)b, (size_t)N * C);
        norm_forward<RMS>(out, mean, rstd, res, w, bias, N, C, eps);
        return;
    }
    const int threads = 256, rows_per_block = threads / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    switch (C / 256) {
    case 1: launch_kernel(norm_fwd_vec_kernel<1, RMS, true>, grid, threads, 0, out, mean, rstd, a, w, bias, N, C, eps, b, res); break;
    case 2: launch_kernel(norm_fwd_vec_kernel<2, RMS, true>, grid, threads, 0, out, mean, rstd, a, w, bias, N, C, eps, b, res); break;
    case 3: launch_kernel(norm_fwd_vec_kernel<3, RMS, true>, grid, threads, 0, out, mean, rstd, a, w, bias, N, C, eps, b, res); break;
    default: launch_kernel(norm_fwd_vec_kernel<4, RMS, true>, grid, threads, 0, out, mean, rstd, a, w, bias, N, C, eps, b, res); break;
    }
}

template <bool RMS, bool ACC = false>
static void norm_backward(bf16 *dinp, bf16 *dw, bf16 *db, const bf16 *dout, const bf16 *inp, const bf16 *w,
                          const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    int chunks = (N + NORM_ROWS_PER_CHUNK - 1) / NORM_ROWS_PER_CHUNK;
    if (chunks > NORM_MAX_CHUNKS) chunks = NORM_MAX_CHUNKS;
    int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    float *partial = (float *)scratch_get((size_t)chunks * 2 * C * sizeof(float));
    int vec = C % 256 == 0 && C <= 1024 && is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) &&
              is_aligned16(w);
    if (vec) {
        const int threads = 128;
        size_t smem = (size_t)2 * C * sizeof(float);
        switch (C / 256) {
        case 1: launch_kernel(norm_bwd_vec_kernel<1, RMS, ACC>, chunks, threads, smem, dinp, partial, dout, inp, w, mean, rstd, N, C, rows_per_chunk); break;
        case 2: launch_kernel(norm_bwd_vec_kernel<2, RMS, ACC>, chunks, threads, smem, dinp, partial, dout, inp, w, mean, rstd, N, C, rows_per_chunk); break;
        case 3: launch_kernel(norm_bwd_vec_kernel<3, RMS, ACC>, chunks, threads, smem, dinp, partial, dout, inp, w, mean, rstd, N, C, rows_per_chunk); break;
        default: launch_kernel(norm_bwd_vec_kernel<4, RMS, ACC>, chunks, threads, smem, dinp, partial, dout, inp, w, mean, rstd, N, C, rows_per_chunk); break;
        }
    } else {
        const int threads = 256;
        launch_kernel(norm_bwd_dx_generic_kernel<RMS, ACC>, (N + 7) / 8, threads, 0, dinp, dout, inp, w, mean, rstd, N, C);
        dim3 grid((C + 255) / 256, chunks);
        launch_kernel(norm_bwd_dw_generic_kernel<RMS>, grid, 256, 0, partial, dout, inp, mean, rstd, N, C,
            rows_per_chunk);
    }
    launch_kernel(norm_dw_reduce_kernel, (2 * C + 31) / 32, dim3(32, 8), 0, dw, db, partial, chunks, C);
}

#endif
