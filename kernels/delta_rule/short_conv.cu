// Causal depthwise short convolution + optional SiLU on CUDA (model/ops/delta_rule/
// delta_rule.h, short_conv_*; docs/delta-rule.md, "Short causal convolution with SiLU"),
// mirroring model/ops/delta_rule/short_conv.c.
//
// Layout: x, y, dy, dx (rows = B*T, D) bf16, channel fastest; weight w (D, W) bf16 with
// w[c][W-1] on the current token; bias (D) bf16 or NULL; conv states (N, D, W-1) fp32, oldest
// input first. The window never reaches into the previous sequence: inputs before a
// sequence start come from state_in (or are 0).
//
// Forward: one thread per channel walks CONV_ROWS consecutive rows (coalesced over channels).
// Backward: da = dy * act'(a) (a recomputed) into fp32 scratch, then dx and dstate_in from da,
// and dw / dbias as per-row-chunk partial sums added in a fixed order (grad_reduce.cuh).
#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/grad_reduce.cuh"
#include "kernels/delta_rule/seq_index.cuh"

#define CONV_THREADS 128  // channels per block
#define CONV_ROWS 16      // rows per block (forward, da, dx)
#define CONV_MAX_W 64

// input of channel c at local time tau of sequence s (tau < 0: the incoming state, or 0)
__device__ __forceinline__ float conv_in(const bf16 *x, const float *state_in, size_t bos, int tau, int s, int c,
                                         int D, int W) {
    if (tau >= 0) return __bfloat162float(x[(bos + (size_t)tau) * D + c]);
    if (!state_in) return 0.f;
    return state_in[((size_t)s * D + c) * (W - 1) + (tau + W - 1)];
}

// pre-activation a[t][c] = bias[c] + sum_j w[c][j] x[t-(W-1)+j][c]
__device__ __forceinline__ float conv_pre(const bf16 *x, const bf16 *w, const bf16 *bias, const float *state_in,
                                          size_t bos, int t, int s, int c, int D, int W) {
    float a = bias ? __bfloat162float(bias[c]) : 0.f;
    for (int j = 0; j < W; j++)
        a += __bfloat162float(w[(size_t)c * W + j]) * conv_in(x, state_in, bos, t - (W - 1) + j, s, c, D, W);
    return a;
}

// y = act(a) (da == NULL), or da = dy * act'(a) (fp32) for the backward
__global__ void conv_fwd_kernel(bf16 *y, float *da, const bf16 *dy, const bf16 *x, const bf16 *w, const bf16 *bias,
                                const float *state_in, size_t rows, int T, int D, int W, const int *offsets, int nseq,
                                int silu) {
    const int c = blockIdx.y * CONV_THREADS + threadIdx.x;
    const size_t row0 = (size_t)blockIdx.x * CONV_ROWS;
    if (c >= D) return;
    SeqCursor sq;
    sq.init(offsets, nseq, T, row0);
    for (int r = 0; r < CONV_ROWS && row0 + r < rows; r++) {
        const size_t row = row0 + r;
        sq.advance(row);
        const float a = conv_pre(x, w, bias, state_in, sq.bos, (int)(row - sq.bos), sq.s, c, D, W);
        const float sg = dr_sigmoid(a);
        if (!da) {
            y[row * D + c] = __float2bfloat16(silu ? a * sg : a);
        } else {
            const float g = __bfloat162float(dy[row * D + c]);
            da[row * D + c] = silu ? g * sg * (1.f + a * (1.f - sg)) : g;
        }
    }
}

// state_out[s][c][m] = input at local time len-(W-1)+m; one thread per (s, c) taking m in
// increasing order, as the CPU does (reads never trail writes if state_out is state_in).
__global__ void conv_state_out_kernel(float *state_out, const bf16 *x, const float *state_in, int N, int T, int D,
                                      int W, const int *offsets) {
    const size_t sc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (sc >= (size_t)N * D) return;
    const int s = (int)(sc / D), c = (int)(sc % D);
    const size_t bos = seq_bos(offsets, T, s);
    const int len = (int)(seq_bos(offsets, T, s + 1) - bos);
    for (int m = 0; m < W - 1; m++)
        state_out[sc * (W - 1) + m] = conv_in(x, state_in, bos, len - (W - 1) + m, s, c, D, W);
}

// dx at local time t (>= 0): sum_j w[c][j] da[t+(W-1)-j] over outputs inside the sequence,
// + the outgoing state's gradient where x[t] is one of the last W-1 inputs
__global__ void conv_dx_kernel(bf16 *dx, const float *da, const float *dstate_out, const bf16 *w, size_t rows, int T,
                               int D, int W, const int *offsets, int nseq) {
    const int c = blockIdx.y * CONV_THREADS + threadIdx.x;
    const size_t row0 = (size_t)blockIdx.x * CONV_ROWS;
    if (c >= D) return;
    SeqCursor sq;
    sq.init(offsets, nseq, T, row0);
    for (int r = 0; r < CONV_ROWS && row0 + r < rows; r++) {
        const size_t row = row0 + r;
        sq.advance(row);
        const int t = (int)(row - sq.bos), len = (int)(sq.eos - sq.bos);
        float acc = 0.f;
        for (int j = 0; j < W; j++) {
            const int tt = t + (W - 1) - j;
            if (tt < len) acc += __bfloat162float(w[(size_t)c * W + j]) * da[(sq.bos + tt) * D + c];
        }
        const int m = t - (len - (W - 1));
        if (dstate_out && m >= 0) acc += dstate_out[((size_t)sq.s * D + c) * (W - 1) + m];
        dx[row * D + c] = __float2bfloat16(acc);
    }
}

// dstate_in[s][c][m]: the input at local time m-(W-1) < 0, same sums as dx
__global__ void conv_dstate_in_kernel(float *dstate_in, const float *da, const float *dstate_out, const bf16 *w,
                                      int N, int T, int D, int W, const int *offsets) {
    const size_t sc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (sc >= (size_t)N * D) return;
    const int s = (int)(sc / D), c = (int)(sc % D);
    const size_t bos = seq_bos(offsets, T, s);
    const int len = (int)(seq_bos(offsets, T, s + 1) - bos);
    for (int m = 0; m < W - 1; m++) {
        float acc = 0.f;
        for (int j = 0; j < W; j++) {
            const int tt = m - j;  // output time reached by input time m-(W-1) through tap j
            if (tt >= 0 && tt < len) acc += __bfloat162float(w[(size_t)c * W + j]) * da[(bos + tt) * D + c];
        }
        const int mo = m - len;  // slot of the outgoing state holding this input (len < W-1)
        if (dstate_out && mo >= 0) acc += dstate_out[sc * (W - 1) + mo];
        dstate_in[sc * (W - 1) + m] = acc;
    }
}

// partial[chunk][c*W+j] = sum_rows x[t-(W-1)+j][c] da[t][c], partial[chunk][D*W+c] = sum_rows
// da[t][c], over the chunk's rows in order; grid (chunks, channel blocks)
__global__ void conv_dw_partial_kernel(float *partial, const float *da, const bf16 *x, const float *state_in,
                                       size_t rows, int rows_per_chunk, int T, int D, int W, const int *offsets,
                                       int nseq) {
    const int c = blockIdx.y * CONV_THREADS + threadIdx.x;
    if (c >= D) return;
    const size_t row0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t row1 = row0 + rows_per_chunk < rows ? row0 + rows_per_chunk : rows;
    float *p = partial + (size_t)blockIdx.x * (W + 1) * D;
    float db = 0.f;
    for (int j = 0; j < W; j++) {
        SeqCursor sq;
        sq.init(offsets, nseq, T, row0);
        float acc = 0.f;
        for (size_t row = row0; row < row1; row++) {
            sq.advance(row);
            const float d = da[row * D + c];
            acc += conv_in(x, state_in, sq.bos, (int)(row - sq.bos) - (W - 1) + j, sq.s, c, D, W) * d;
            if (j == 0) db += d;
        }
        p[(size_t)c * W + j] = acc;
    }
    p[(size_t)D * W + c] = db;
}

__global__ void conv_step_kernel(bf16 *y, float *state, const bf16 *x, const bf16 *w, const bf16 *bias, int N, int D,
                                 int W, int silu) {
    const size_t nc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (nc >= (size_t)N * D) return;
    const int c = (int)(nc % D);
    float *st = state + nc * (W - 1);
    const float xv = __bfloat162float(x[nc]);
    float a = bias ? __bfloat162float(bias[c]) : 0.f;
    for (int j = 0; j < W - 1; j++) a += __bfloat162float(w[(size_t)c * W + j]) * st[j];
    a += __bfloat162float(w[(size_t)c * W + W - 1]) * xv;
    y[nc] = __float2bfloat16(silu ? a * dr_sigmoid(a) : a);
    for (int m = 0; m + 1 < W - 1; m++) st[m] = st[m + 1];
    if (W > 1) st[W - 2] = xv;
}

static void conv_check(int B, int T, int D, int W, const int *offsets, int nseq, const char *op) {
    if (D < 1 || W < 1 || W > CONV_MAX_W) die("%s: bad D=%d W=%d (1 <= W <= %d)", op, D, W, CONV_MAX_W);
    if (B < 0 || T < 0) die("%s: bad B=%d T=%d", op, B, T);
    if (offsets && (B != 1 || nseq < 1)) die("%s: offsets need B == 1 and nseq >= 1 (B=%d nseq=%d)", op, B, nseq);
}

extern "C" void cuda_short_conv_forward(real *y, real *state_out, const real *x, const real *w, const real *bias,
                                        const real *state_in, int B, int T, int D, int W, const int *offsets,
                                        int nseq, int silu) {
    PROFILE("short_conv_fwd");
    conv_check(B, T, D, W, offsets, nseq, "cuda_short_conv_forward");
    const size_t rows = (size_t)B * T;
    const int N = offsets ? nseq : B;
    const dim3 grid((unsigned)((rows + CONV_ROWS - 1) / CONV_ROWS), (unsigned)((D + CONV_THREADS - 1) / CONV_THREADS));
    if (rows > 0)
        launch_kernel(conv_fwd_kernel, grid, dim3(CONV_THREADS), 0, (bf16 *)y, (float *)NULL, (const bf16 *)NULL,
                      (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, rows, T, D, W,
                      offsets, nseq, silu);
    // after y: state_out may be the same buffer as state_in
    if (state_out && W > 1 && N > 0)
        launch_kernel(conv_state_out_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0,
                      (float *)state_out, (const bf16 *)x, (const float *)state_in, N, T, D, W, offsets);
}

extern "C" void cuda_short_conv_backward(real *dx, real *dw, real *dbias, real *dstate_in, const real *dy,
                                         const real *dstate_out, const real *x, const real *w, const real *bias,
                                         const real *state_in, int B, int T, int D, int W, const int *offsets,
                                         int nseq, int silu) {
    PROFILE("short_conv_bwd");
    conv_check(B, T, D, W, offsets, nseq, "cuda_short_conv_backward");
    const size_t rows = (size_t)B * T;
    const int N = offsets ? nseq : B;
    int chunks;
    const int per = grad_row_chunks(rows, &chunks);
    const size_t da_n = rows * D, part_stride = (size_t)(W + 1) * D;
    float *da = (float *)scratch_get((da_n + (size_t)chunks * part_stride) * sizeof(float));
    float *partial = da + da_n;
    const dim3 grid((unsigned)((rows + CONV_ROWS - 1) / CONV_ROWS), (unsigned)((D + CONV_THREADS - 1) / CONV_THREADS));
    const unsigned dgrid = (unsigned)((D + CONV_THREADS - 1) / CONV_THREADS);
    if (rows > 0) {
        launch_kernel(conv_fwd_kernel, grid, dim3(CONV_THREADS), 0, (bf16 *)NULL, da, (const bf16 *)dy,
                      (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, rows, T, D, W,
                      offsets, nseq, silu);
        launch_kernel(conv_dx_kernel, grid, dim3(CONV_THREADS), 0, (bf16 *)dx, (const float *)da,
                      (const float *)dstate_out, (const bf16 *)w, rows, T, D, W, offsets, nseq);
        launch_kernel(conv_dw_partial_kernel, dim3((unsigned)chunks, dgrid), dim3(CONV_THREADS), 0, partial,
                      (const float *)da, (const bf16 *)x, (const float *)state_in, rows, per, T, D, W, offsets, nseq);
        grad_reduce_add((bf16 *)dw, partial, chunks, D * W, part_stride);
        if (dbias) grad_reduce_add((bf16 *)dbias, partial + (size_t)D * W, chunks, D, part_stride);
    }
    if (dstate_in && W > 1 && N > 0)
        launch_kernel(conv_dstate_in_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0,
                      (float *)dstate_in, (const float *)da, (const float *)dstate_out, (const bf16 *)w, N, T, D, W,
                      offsets);
}

extern "C" void cuda_short_conv_step(real *y, real *state, const real *x, const real *w, const real *bias, int N,
                                     int D, int W, int silu) {
    PROFILE("short_conv_step");
    if (D < 1 || W < 1 || W > CONV_MAX_W) die("cuda_short_conv_step: bad D=%d W=%d", D, W);
    if (N < 1) return;
    launch_kernel(conv_step_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0, (bf16 *)y,
                  (float *)state, (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, N, D, W, silu);
}
