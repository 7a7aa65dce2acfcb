// Causal depthwise short convolution + optional SiLU on CUDA (model/ops/delta_rule/
// delta_rule.h, short_conv_*; docs/delta-rule.md, "Short causal convolution with SiLU"),
// mirroring model/ops/delta_rule/short_conv.c.
//
// Layout: x, y, dy, dx (rows = B*T, D) bf16, channel fastest; weight w (D, W) bf16 with
// w[c][W-1] on the current token; bias (D) bf16 or NULL; their gradients dw, dbias fp32 (the
// parameter gradients: model/backend.h, `grad_size`); conv states (N, D, W-1) fp32, oldest
// input first. The window never reaches into the previous sequence: inputs before a
// sequence start come from state_in (or are 0).
//
// Two paths with the same bits (every fp32 sum with the same operands in the same order):
// - Fast, W <= CONV_FAST_W (4; the layers use 4): kernels templated on W and on V channels per
//   thread (V = 4, 8-byte accesses, when D % 4 == 0 and the tensors 8-byte aligned, forward
//   only; else V = 2, bf16x2 accesses, when D is even and they are 4-byte aligned), taps
//   unrolled, the W inputs of a row in registers. A block of CONV_TILE_THREADS threads stages
//   the rows it walks of its CONV_TILE_THREADS * V channels in shared memory first (16-byte
//   cp.async copies when D % 8 == 0), so a whole tile of loads is in flight at once. Forward: a
//   block per CONV_FWD_ROWS rows (half at V = 4). Backward, one fused pass: a block per
//   (grad_row_chunks chunk, channel slab) whose threads recompute a and da = dy * act'(a) row by
//   row (W-1 halo rows past the chunk, inside the sequence, to finish dx of its last rows),
//   write dx and keep the dw / dbias partials of the chunk in registers; da never reaches
//   memory; dstate_in recomputes da of the first W-1 rows of each sequence.
// - General, any W <= CONV_MAX_W, and every W under HYBRID_CONV_REF=1 (read at each call):
//   forward: one thread per channel walks CONV_ROWS rows, W loads a row. Backward: da into fp32
//   scratch, then dx and dstate_in from da, and the dw / dbias partials (a pass per tap).
// Both add the chunk partials in a fixed order (grad_reduce.cuh). The fast path is compared bit
// for bit with the general one (tests/gpu/test_delta_rule_layer.c) on the CPU emulator and the
// H200. History (docs/delta-rule.md, "CUDA kernels"; BENCHMARKS.md): at 65,536 x 768 (W 4) the
// first fused backward took the backward from 1.20 to 0.45 ms a call and the register-window
// forward 0.37 to 0.17 ms; both then kept about one row per thread in flight (a register ring
// whose shifts waited on its loads), which the staged tiles replace; four channels a thread
// (session 21) took the forward from 0.127 to 0.113 ms and the backward from 0.276 to 0.241;
// the lean walks and act.cuh's sigmoid on the special-function unit (session 22; the kernels
// were bound by instruction issue) to 0.064 and 0.152 ms, and two channels a thread again in the
// backward to 0.148.
#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/grad_reduce.cuh"
#include "kernels/delta_rule/row_vec.cuh"
#include "kernels/delta_rule/seq_index.cuh"
#include "kernels/mma.cuh"

#include <type_traits>

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

// the activation of a pre-activation a, and da = g act'(a) for the incoming gradient g: one
// expression for every kernel below, so the fast and the general paths give the same bits
// (dr_sigmoid: act.cuh, one exponential and no branch)
__device__ __forceinline__ float conv_act(float a, int silu) { return silu ? a * dr_sigmoid(a) : a; }
__device__ __forceinline__ float conv_dact(float a, float g, int silu) {
    const float sg = dr_sigmoid(a);
    return silu ? g * sg * (1.f + a * (1.f - sg)) : g;
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
        if (!da) y[row * D + c] = __float2bfloat16(conv_act(a, silu));
        else da[row * D + c] = conv_dact(a, __bfloat162float(dy[row * D + c]), silu);
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

// dstate_in[s][c][m]: the input at local time m-(W-1) < 0, same sums as dx. da from the
// general backward's fp32 scratch, or (da NULL: the fast path stores none) recomputed for the
// first W-1 rows of each sequence from x and dy, as conv_fwd_kernel would write it.
__global__ void conv_dstate_in_kernel(float *dstate_in, const float *da, const bf16 *dy, const float *dstate_out,
                                      const bf16 *x, const bf16 *w, const bf16 *bias, const float *state_in, int N,
                                      int T, int D, int W, const int *offsets, int silu) {
    const size_t sc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (sc >= (size_t)N * D) return;
    const int s = (int)(sc / D), c = (int)(sc % D);
    const size_t bos = seq_bos(offsets, T, s);
    const int len = (int)(seq_bos(offsets, T, s + 1) - bos);
    for (int m = 0; m < W - 1; m++) {
        float acc = 0.f;
        for (int j = 0; j < W; j++) {
            const int tt = m - j;  // output time reached by input time m-(W-1) through tap j
            if (tt < 0 || tt >= len) continue;
            const size_t i = (bos + tt) * D + c;
            const float d = da ? da[i]
                               : conv_dact(conv_pre(x, w, bias, state_in, bos, tt, s, c, D, W),
                                           __bfloat162float(dy[i]), silu);
            acc += __bfloat162float(w[(size_t)c * W + j]) * d;
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

// ---- the fast path: W <= CONV_FAST_W, taps unrolled, windows in registers ----------------
// Every value below is computed with the same fp32 expression, operands and order as the
// general kernels above (conv_pre's bias-then-taps sum, the da formula, dx's sum over taps in j
// order then the outgoing state's term, each dw / dbias partial over its chunk's rows in
// increasing order), so both paths give the same bits; HYBRID_CONV_REF=1 runs the general
// kernels for any W (tests/gpu/test_delta_rule_layer.c compares the two bit for bit).
#define CONV_FAST_W 4         // widths with a fused kernel
#define CONV_TILE_THREADS 64  // threads per block of the fast kernels, V channels each
#define CONV_FWD_ROWS 64      // rows per block, fast forward (x staged: 16 KiB at V = 2)
#define CONV_BWD_TILE 34      // rows of x and dy staged per pass, fast backward (V <= 2): 17 KiB
                              // (+1 KiB the SM reserves a block), so 12 blocks of 2 warps fit an
                              // SM's 228 KiB (the kernel's 83 registers allow 11; a 64-row chunk
                              // and its halo in two passes)
// At V = 4 a forward block holds twice the channels, so half the rows: the same shared memory a
// block (full tiles at V = 4 measured slower than V = 2, half tiles faster: BENCHMARKS.md,
// session 21)
template <int V>
__host__ __device__ constexpr int conv_fwd_rows() { return V == 4 ? CONV_FWD_ROWS / 2 : CONV_FWD_ROWS; }

// V consecutive channels (V == 4: one aligned 8-byte access, two bf16x2; V == 2: one aligned
// bf16x2 access; the caller checks alignment)
template <int V>
__device__ __forceinline__ void conv_load(float *v, const bf16 *p) {
    if (V == 4) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        const __nv_bfloat162 h0 = *reinterpret_cast<const __nv_bfloat162 *>(&u.x);
        const __nv_bfloat162 h1 = *reinterpret_cast<const __nv_bfloat162 *>(&u.y);
        v[0] = __low2float(h0);
        v[1 % V] = __high2float(h0);
        v[2 % V] = __low2float(h1);
        v[V - 1] = __high2float(h1);
    } else if (V == 2) {
        const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(p);
        v[0] = __low2float(h);
        v[V - 1] = __high2float(h);
    } else {
        v[0] = __bfloat162float(*p);
    }
}

template <int V>
__device__ __forceinline__ void conv_store(bf16 *p, const float *v) {
    if (V == 4) {
        const __nv_bfloat162 h0 = __floats2bfloat162_rn(v[0], v[1 % V]), h1 = __floats2bfloat162_rn(v[2 % V], v[V - 1]);
        uint2 u;
        u.x = *reinterpret_cast<const unsigned *>(&h0);
        u.y = *reinterpret_cast<const unsigned *>(&h1);
        *reinterpret_cast<uint2 *>(p) = u;
    } else if (V == 2) {
        *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v[0], v[V - 1]);
    } else {
        *p = __float2bfloat16(v[0]);
    }
}

// xw[v][i] = the input at local time t-(W-1)+i of channel c+v (what conv_in returns); the
// last, at t itself, is xn (already loaded)
template <int W, int V>
__device__ __forceinline__ void conv_window(float (*xw)[W], const float *xn, const bf16 *x, const float *state_in,
                                            size_t bos, int t, int s, int c, int D) {
#pragma unroll
    for (int v = 0; v < V; v++) xw[v][W - 1] = xn[v];
#pragma unroll
    for (int i = 0; i < W - 1; i++) {
        const int tau = t - (W - 1) + i;
        float v2[V];
        if (tau >= 0) {
            conv_load<V>(v2, x + (bos + (size_t)tau) * D + c);
        } else {
#pragma unroll
            for (int v = 0; v < V; v++)
                v2[v] = state_in ? state_in[((size_t)s * D + c + v) * (W - 1) + (tau + W - 1)] : 0.f;
        }
#pragma unroll
        for (int v = 0; v < V; v++) xw[v][i] = v2[v];
    }
}

// Rows [qa, qa+nr) of channels [c0, c0+cw) of src (rows of D channels) into dst[nr][CB] in
// shared memory: 16-byte cp.async copies spread over the block when vec16 (D % 8 == 0, src
// 16-byte aligned; cw is then a multiple of 8), else one bf16 per thread and step. The caller
// commits, waits and syncs. A whole tile in flight at once is what makes the walks below fast:
// the first version had a register ring of the next rows per thread, whose shifts waited on
// the pending loads, so about one row a thread was in flight (docs/delta-rule.md, "CUDA kernels").
template <int CB>
__device__ __forceinline__ void conv_tile_load(bf16 *dst, const bf16 *src, size_t qa, int nr, int c0, int cw, int D,
                                               int vec16) {
    if (vec16) {
        const int upr = cw / 8;  // 16-byte units a row
        for (int u = threadIdx.x; u < nr * upr; u += blockDim.x) {
            const int r = u / upr, k = u - r * upr;
            cp_async16(dst + (size_t)r * CB + k * 8, src + (qa + r) * D + c0 + k * 8, true);
        }
    } else {
        for (int e = threadIdx.x; e < nr * cw; e += blockDim.x) {
            const int r = e / cw, k = e - r * cw;
            dst[(size_t)r * CB + k] = src[(qa + r) * D + c0 + k];
        }
    }
}

// The register histories of the walks below. An input window xw holds the inputs at t-(W-1) .. t
// (oldest first): conv_push shifts it by one row, conv_lift moves it one place up before a lean
// walk's first row (which then shifts like every other). dq holds da[q-k] at k (newest first):
// conv_push_front. conv_dx_taps: dx of row p = q-e from dq, the taps j >= W-1-e in j order
// (conv_dx_kernel's sum, the taps past a sequence end skipped).
template <int W>
__device__ __forceinline__ void conv_push(float *xw, float xn) {
#pragma unroll
    for (int i = 0; i + 1 < W; i++) xw[i] = xw[i + 1];
    xw[W - 1] = xn;
}
template <int W>
__device__ __forceinline__ void conv_lift(float *xw) {
#pragma unroll
    for (int i = W - 1; i > 0; i--) xw[i] = xw[i - 1];
}
template <int W>
__device__ __forceinline__ void conv_push_front(float *dq, float d) {
#pragma unroll
    for (int k = W - 1; k > 0; k--) dq[k] = dq[k - 1];
    dq[0] = d;
}
template <int W>
__device__ __forceinline__ float conv_dx_taps(const float *wv, const float *dq, int e) {
    float acc = 0.f;
#pragma unroll
    for (int j = W - 1 - e; j < W; j++) acc += wv[j] * dq[j - (W - 1 - e)];
    return acc;
}

// the window at `row` (local time t in sq's sequence; xn: x at `row`): loaded whole at the
// thread's first row and at a sequence start, else shifted by one
template <int W, int V>
__device__ __forceinline__ void conv_slide(float (*xw)[W], const float *xn, const bf16 *x, const float *state_in,
                                           const SeqCursor &sq, size_t row, bool first, int c, int D) {
    const int t = (int)(row - sq.bos);
    if (first || t == 0) {
        conv_window<W, V>(xw, xn, x, state_in, sq.bos, t, sq.s, c, D);
        return;
    }
#pragma unroll
    for (int v = 0; v < V; v++) conv_push<W>(xw[v], xn[v]);
}

// conv_pre from the window: bias, then the taps j = 0..W-1
template <int W>
__device__ __forceinline__ float conv_pre_win(float b, const float *wv, const float *xw) {
    float a = b;
#pragma unroll
    for (int j = 0; j < W; j++) a += wv[j] * xw[j];
    return a;
}

// Forward: a block takes CONV_FWD_ROWS rows of CB = CONV_TILE_THREADS * V channels, staged in
// shared memory (conv_tile_load); each thread walks the rows for its V channels with the W
// inputs of a row in registers (loaded whole at its first row and at a sequence start, from
// global memory while the tile is in flight).
// NORM (V = 4, D % 128 == 0: a warp's 128 channels are one head; short_conv_l2norm_forward):
// each row's activations are rounded to bf16, as the plain forward stores them, and then
// L2-normalised over the head by l2norm_fwd_vec_kernel<4>'s row_l2norm (row_vec.cuh), so y and
// rstd have the bits of the two separate ops; rstd (rows, D / 128) is written by lane 0.
template <int W, int V, bool NORM>
__global__ void conv_fwd_fast_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, const bf16 *bias,
                                     const float *state_in, size_t rows, int T, int D, const int *offsets, int nseq,
                                     int silu, int vec16, float eps) {
    constexpr int CB = CONV_TILE_THREADS * V;
    constexpr int FR = conv_fwd_rows<V>();
    DYNAMIC_SMEM(bf16, xs);  // [FR][CB]: x at the block's rows
    const int c0 = blockIdx.y * CB, cw = D - c0 < CB ? D - c0 : CB, lc = threadIdx.x * V, c = c0 + lc;
    const bool on = lc < cw;
    const size_t row0 = (size_t)blockIdx.x * FR;
    const int nr = (int)(rows - row0 < FR ? rows - row0 : FR);
    float wv[V][W], b[V], xw[V][W];
#pragma unroll
    for (int v = 0; v < V; v++) {
        b[v] = on && bias ? __bfloat162float(bias[c + v]) : 0.f;
#pragma unroll
        for (int j = 0; j < W; j++) {
            wv[v][j] = on ? __bfloat162float(w[(size_t)(c + v) * W + j]) : 0.f;
            xw[v][j] = 0.f;
        }
    }
    SeqCursor sq;
    sq.init(offsets, nseq, T, row0);
    if (on) {  // the window of the first row but its last input (read from the tile below)
        const float zero[V] = {};
        conv_window<W, V>(xw, zero, x, state_in, sq.bos, (int)(row0 - sq.bos), sq.s, c, D);
    }
    conv_tile_load<CB>(xs, x, row0, nr, c0, cw, D, vec16);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (!on) return;  // NORM: a whole warp (D % 128 == 0)
    // y at `row` from its V activations
    auto emit = [&](size_t row, float *out) {
        if (NORM) {
            float xv[V];
#pragma unroll
            for (int v = 0; v < V; v++) xv[v] = __bfloat162float(__float2bfloat16(out[v]));
            const float rs = row_l2norm<V>(out, xv, eps);
            if ((threadIdx.x & 31) == 0) rstd[row * (D / 128) + c / 128] = rs;
        }
        conv_store<V>(y + row * D + c, out);
    };
    if (row0 + nr <= sq.eos) {
        // the block's rows in one sequence (every block without document resets): no cursor,
        // no sequence start to look for; the window moved one place up first, so every row
        // (the first too) shifts it by one, and a loop unrolled W times renames the registers
        // instead of moving them (the same sums as below)
#pragma unroll
        for (int v = 0; v < V; v++) conv_lift<W>(xw[v]);
        auto step = [&](int r) {
            float xn[V], out[V];
            conv_load<V>(xn, xs + r * CB + lc);
#pragma unroll
            for (int v = 0; v < V; v++) {
                conv_push<W>(xw[v], xn[v]);
                out[v] = conv_act(conv_pre_win<W>(b[v], wv[v], xw[v]), silu);
            }
            emit(row0 + r, out);
        };
        if (nr == FR) {
#pragma unroll W
            for (int r = 0; r < FR; r++) step(r);
        } else {
            for (int r = 0; r < nr; r++) step(r);
        }
        return;
    }
    for (int r = 0; r < nr; r++) {
        const size_t row = row0 + r;
        sq.advance(row);
        float xn[V];
        conv_load<V>(xn, xs + (size_t)r * CB + lc);
        if (r == 0) {
#pragma unroll
            for (int v = 0; v < V; v++) xw[v][W - 1] = xn[v];
        } else {
            conv_slide<W, V>(xw, xn, x, state_in, sq, row, false, c, D);
        }
        float out[V];
#pragma unroll
        for (int v = 0; v < V; v++) {
            const float a = conv_pre_win<W>(b[v], wv[v], xw[v]);
            out[v] = conv_act(a, silu);
        }
        emit(row, out);
    }
}

// Backward, fused: a block per (row chunk, CB = CONV_TILE_THREADS * V channels), the chunks of
// grad_row_chunks (the partials' layout and per-row order of conv_dw_partial_kernel). It stages
// x and dy at rows q from the chunk's first to W-1 rows past its last (the halo, only inside the
// last row's sequence) in shared memory, CONV_BWD_TILE rows a pass. Each thread walks those
// rows for its V channels, recomputing a and da[q] from a register window of the W inputs
// (before the sequence start: state_in or 0), keeping da of the last W rows. For a chunk row q:
// the dw[j] / dbias partials take x[q-(W-1)+j] da[q] / da[q]. dx[p] needs da[p .. min(p+W-1,
// end)]: it is written at q = p+W-1, or at the sequence's last row for the rows whose window is
// cut there; the sum is
// conv_dx_kernel's (taps in j order, the missing ones skipped, then dstate_out). One pass over x
// and dy, no fp32 da in memory; want_db == 0 (no dbias) skips the dbias partials.
template <int W, int V>
__global__ void conv_bwd_fused_kernel(bf16 *dx, float *partial, const bf16 *dy, const float *dstate_out,
                                      const bf16 *x, const bf16 *w, const bf16 *bias, const float *state_in,
                                      size_t rows, int rows_per_chunk, int T, int D, const int *offsets, int nseq,
                                      int silu, int vec16, int want_db) {
    constexpr int CB = CONV_TILE_THREADS * V;
    DYNAMIC_SMEM(bf16, sm);
    constexpr int BT = CONV_BWD_TILE;
    bf16 *xs = sm, *gs = sm + (size_t)BT * CB;  // [BT][CB] each: x, dy at a pass's rows
    const int c0 = blockIdx.y * CB, cw = D - c0 < CB ? D - c0 : CB, lc = threadIdx.x * V, c = c0 + lc;
    const bool on = lc < cw;
    const size_t row0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t row1 = row0 + rows_per_chunk < rows ? row0 + rows_per_chunk : rows;
    size_t qend = row1 + (W - 1) < rows ? row1 + (W - 1) : rows;
    {
        SeqCursor se;  // the halo stays in the sequence of the chunk's last row
        se.init(offsets, nseq, T, row1 - 1);
        if (se.eos < qend) qend = se.eos;
    }
    float wv[V][W], b[V], xw[V][W], dq[V][W], pw[V][W], pb[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
        b[v] = on && bias ? __bfloat162float(bias[c + v]) : 0.f;
        pb[v] = 0.f;
#pragma unroll
        for (int j = 0; j < W; j++) {
            wv[v][j] = on ? __bfloat162float(w[(size_t)(c + v) * W + j]) : 0.f;
            pw[v][j] = 0.f;
            dq[v][j] = 0.f;
            xw[v][j] = 0.f;
        }
    }
    SeqCursor sq;
    sq.init(offsets, nseq, T, row0);
    if (on) {  // the window of the first row but its last input (read from the tile below)
        const float zero[V] = {};
        conv_window<W, V>(xw, zero, x, state_in, sq.bos, (int)(row0 - sq.bos), sq.s, c, D);
    }
    // The chunk and its halo in one sequence and no outgoing state's gradient (every chunk of
    // the layers without document resets): the rows are walked by lean_row below, with local
    // 32-bit indices, no cursor and no per-row sequence tests; the same sums as the general
    // walk. The window is moved one place up first, so every row (the first too) shifts it.
    const bool lean = !dstate_out && sq.eos >= row1;
    const int n1 = (int)(row1 - row0), nq = (int)(qend - row0);  // chunk rows; with the halo
    if (lean) {
#pragma unroll
        for (int v = 0; v < V; v++) conv_lift<W>(xw[v]);
    }
    bf16 *dxr = dx + row0 * D + c;  // dx at local row 0
    // local row q, at row r of the staged pass: da[q]; the partials while q is a chunk row;
    // dx[q-(W-1)] (all its taps inside the sequence: da[q-(W-1) .. q])
    auto lean_row = [&](int q, int r, const bf16 *xs_, const bf16 *gs_) {
        float g[V], xn[V];
        conv_load<V>(g, gs_ + r * CB + lc);
        conv_load<V>(xn, xs_ + r * CB + lc);
#pragma unroll
        for (int v = 0; v < V; v++) {
            conv_push<W>(xw[v], xn[v]);
            const float d = conv_dact(conv_pre_win<W>(b[v], wv[v], xw[v]), g[v], silu);
            conv_push_front<W>(dq[v], d);
            if (q < n1) {
#pragma unroll
                for (int j = 0; j < W; j++) pw[v][j] += xw[v][j] * d;
                pb[v] += d;
            }
        }
        if (q >= W - 1) {
            float out[V];
#pragma unroll
            for (int v = 0; v < V; v++) out[v] = conv_dx_taps<W>(wv[v], dq[v], W - 1);
            conv_store<V>(dxr + (size_t)(q - (W - 1)) * D, out);
        }
    };
    for (size_t qa = row0; qa < qend; qa += BT) {
        const int nr = (int)(qend - qa < BT ? qend - qa : BT);
        if (qa != row0) __syncthreads();  // every thread is done with the previous pass's rows
        conv_tile_load<CB>(xs, x, qa, nr, c0, cw, D, vec16);
        conv_tile_load<CB>(gs, dy, qa, nr, c0, cw, D, vec16);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        if (!on) continue;
        if (lean) {
            const int q0 = (int)(qa - row0);
            if (nr == BT) {
#pragma unroll W
                for (int r = 0; r < BT; r++) lean_row(q0 + r, r, xs, gs);
            } else {
                for (int r = 0; r < nr; r++) lean_row(q0 + r, r, xs, gs);
            }
            continue;
        }
        for (int r = 0; r < nr; r++) {
            const size_t q = qa + r;
            sq.advance(q);
            float g[V], xn[V];
            conv_load<V>(g, gs + (size_t)r * CB + lc);
            conv_load<V>(xn, xs + (size_t)r * CB + lc);
            if (q == row0) {
#pragma unroll
                for (int v = 0; v < V; v++) xw[v][W - 1] = xn[v];
            } else {
                conv_slide<W, V>(xw, xn, x, state_in, sq, q, false, c, D);
            }
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float a = conv_pre_win<W>(b[v], wv[v], xw[v]);
                const float d = conv_dact(a, g[v], silu);
                conv_push_front<W>(dq[v], d);  // dq[v][k] = da[q-k]
                if (q < row1) {
#pragma unroll
                    for (int j = 0; j < W; j++) pw[v][j] += xw[v][j] * d;
                    pb[v] += d;
                }
            }
            const int len = (int)(sq.eos - sq.bos);
            const size_t lo = row0 > sq.bos ? row0 : sq.bos;  // dx rows of this chunk and sequence
            // e: dx row p = q-e, complete now when e == W-1, or when q ends the sequence (then the
            // taps j < W-1-e reach past it and are skipped, as conv_dx_kernel's tt < len does)
            const bool last = q + 1 == sq.eos;
#pragma unroll
            for (int e = W - 1; e >= 0; e--) {
                if (e < W - 1 && !last) continue;
                if (q < lo + (size_t)e) continue;  // p below the chunk or the sequence
                const size_t p = q - e;
                if (p >= row1) continue;
                const int m = (int)(p - sq.bos) - (len - (W - 1));
                float out[V];
#pragma unroll
                for (int v = 0; v < V; v++) {
                    float acc = conv_dx_taps<W>(wv[v], dq[v], e);
                    if (dstate_out && m >= 0) acc += dstate_out[((size_t)sq.s * D + c + v) * (W - 1) + m];
                    out[v] = acc;
                }
                conv_store<V>(dx + p * D + c, out);
            }
        }
    }
    if (!on) return;
    if (lean && qend == sq.eos) {
        // the sequence ends at the last walked row: dx of its last W-1 rows lacks the taps past
        // the end (the general walk's `last` case); dq[v][k] = da[nq-1-k]
#pragma unroll
        for (int e = W - 2; e >= 0; e--) {
            const int p = nq - 1 - e;
            if (p < 0 || p >= n1) continue;
            float out[V];
#pragma unroll
            for (int v = 0; v < V; v++) out[v] = conv_dx_taps<W>(wv[v], dq[v], e);
            conv_store<V>(dxr + (size_t)p * D, out);
        }
    }
    float *pp = partial + (size_t)blockIdx.x * (W + 1) * D;
#pragma unroll
    for (int v = 0; v < V; v++) {
#pragma unroll
        for (int j = 0; j < W; j++) pp[(size_t)(c + v) * W + j] = pw[v][j];
        if (want_db) pp[(size_t)D * W + c + v] = pb[v];
    }
}

// HYBRID_CONV_REF=1: the general kernels for every W (read at each call, so a test can switch)
static int conv_use_ref(void) { return env_flag("HYBRID_CONV_REF"); }

// channels a thread: V = 4 when D % 4 == 0 and the bf16 tensors are 8-byte aligned, 2 when D is
// even and they are 4-byte aligned, else 1
static int conv_vec(int D, const void *a, const void *b, const void *c) {
    const uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
    return D % 4 == 0 && u % 8 == 0 ? 4 : D % 2 == 0 && u % 4 == 0 ? 2 : 1;
}

// 16-byte tile copies (conv_tile_load): D a multiple of 8, the staged tensors 16-byte aligned
static int conv_vec16(int D, const void *a, const void *b) {
    return D % 8 == 0 && ((uintptr_t)a | (uintptr_t)b) % 16 == 0;
}

// NORM: rstd and eps used (the caller checks V == 4 and D % 128 == 0)
template <int W, int V, bool NORM = false>
static void conv_fwd_fast(bf16 *y, const bf16 *x, const bf16 *w, const bf16 *bias, const float *state_in,
                          size_t rows, int T, int D, const int *offsets, int nseq, int silu, float *rstd = NULL,
                          float eps = 0.f) {
    const int CB = CONV_TILE_THREADS * V;
    const int FR = conv_fwd_rows<V>();
    const dim3 grid((unsigned)((rows + FR - 1) / FR), (unsigned)((D + CB - 1) / CB));
    launch_kernel(conv_fwd_fast_kernel<W, V, NORM>, grid, dim3(CONV_TILE_THREADS), (size_t)FR * CB * sizeof(bf16),
                  y, rstd, x, w, bias, state_in, rows, T, D, offsets, nseq, silu, conv_vec16(D, x, x), eps);
}

// The backward takes at most two channels a thread (VA = 4 runs the V = 2 kernel, whose
// alignment it implies): since the lean walks, four measured slower (0.154 against 0.148 ms at
// 65,536 x 768, session 22: 120 registers, 8 blocks an SM, against 83-86 and 10-11).
template <int W, int VA>
static void conv_bwd_fast(bf16 *dx, float *partial, const bf16 *dy, const float *dstate_out, const bf16 *x,
                          const bf16 *w, const bf16 *bias, const float *state_in, size_t rows, int per, int chunks,
                          int T, int D, const int *offsets, int nseq, int silu, int want_db) {
    constexpr int V = VA < 2 ? VA : 2;
    const int CB = CONV_TILE_THREADS * V;
    const dim3 grid((unsigned)chunks, (unsigned)((D + CB - 1) / CB));
    launch_kernel(conv_bwd_fused_kernel<W, V>, grid, dim3(CONV_TILE_THREADS),
                  (size_t)2 * CONV_BWD_TILE * CB * sizeof(bf16), dx, partial, dy, dstate_out, x, w, bias, state_in,
                  rows, per, T, D, offsets, nseq, silu, conv_vec16(D, x, dy), want_db);
}

#define CONV_DISPATCH(fn, W, V, ...)                                  \
    do {                                                              \
        switch ((W) * 10 + (V)) {                                     \
        case 11: fn<1, 1>(__VA_ARGS__); break;                        \
        case 12: fn<1, 2>(__VA_ARGS__); break;                        \
        case 14: fn<1, 4>(__VA_ARGS__); break;                        \
        case 21: fn<2, 1>(__VA_ARGS__); break;                        \
        case 22: fn<2, 2>(__VA_ARGS__); break;                        \
        case 24: fn<2, 4>(__VA_ARGS__); break;                        \
        case 31: fn<3, 1>(__VA_ARGS__); break;                        \
        case 32: fn<3, 2>(__VA_ARGS__); break;                        \
        case 34: fn<3, 4>(__VA_ARGS__); break;                        \
        case 41: fn<4, 1>(__VA_ARGS__); break;                        \
        case 42: fn<4, 2>(__VA_ARGS__); break;                        \
        default: fn<4, 4>(__VA_ARGS__); break;                        \
        }                                                             \
    } while (0)

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
    y[nc] = __float2bfloat16(conv_act(a, silu));
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
    if (rows > 0 && W <= CONV_FAST_W && !conv_use_ref()) {
        const int V = conv_vec(D, x, y, x);
        CONV_DISPATCH(conv_fwd_fast, W, V, (bf16 *)y, (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias,
                      (const float *)state_in, rows, T, D, offsets, nseq, silu);
    } else if (rows > 0) {
        launch_kernel(conv_fwd_kernel, grid, dim3(CONV_THREADS), 0, (bf16 *)y, (float *)NULL, (const bf16 *)NULL,
                      (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, rows, T, D, W,
                      offsets, nseq, silu);
    }
    // after y: state_out may be the same buffer as state_in
    if (state_out && W > 1 && N > 0)
        launch_kernel(conv_state_out_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0,
                      (float *)state_out, (const bf16 *)x, (const float *)state_in, N, T, D, W, offsets);
}

// The optional fused op (model/ops/delta_rule/delta_rule.h): one pass at the layers' W = 4, four
// channels a thread and heads of 128 (a warp a head); else the two ops through a bf16 scratch
// tensor. Either way the bits of short_conv_forward then l2norm_forward.
extern "C" void cuda_short_conv_l2norm_forward(real *y, real *rstd, const real *x, const real *w, int B, int T,
                                               int D, int W, const int *offsets, int nseq, int K, real eps) {
    PROFILE("short_conv_l2norm_fwd");
    conv_check(B, T, D, W, offsets, nseq, "cuda_short_conv_l2norm_forward");
    if (K < 1 || D % K) die("cuda_short_conv_l2norm_forward: D=%d is not a multiple of the head size K=%d", D, K);
    const size_t rows = (size_t)B * T;
    if (rows == 0) return;
    if (W == 4 && !conv_use_ref() && K == 128 && conv_vec(D, x, y, x) == 4) {
        conv_fwd_fast<4, 4, true>((bf16 *)y, (const bf16 *)x, (const bf16 *)w, NULL, NULL, rows, T, D, offsets, nseq,
                                  1, (float *)rstd, (float)eps);
        return;
    }
    real *tmp = (real *)scratch_get(rows * D * sizeof(bf16));
    cuda_short_conv_forward(tmp, NULL, x, w, NULL, NULL, B, T, D, W, offsets, nseq, 1);
    cuda_l2norm_forward(y, rstd, tmp, rows * (D / K), K, eps);
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
    if (W <= CONV_FAST_W && !conv_use_ref()) {
        const size_t part_stride = (size_t)(W + 1) * D;
        float *partial = (float *)scratch_get((size_t)chunks * part_stride * sizeof(float));
        if (rows > 0) {
            const int V = conv_vec(D, x, dy, dx);
            CONV_DISPATCH(conv_bwd_fast, W, V, (bf16 *)dx, partial, (const bf16 *)dy, (const float *)dstate_out,
                          (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, rows, per,
                          chunks, T, D, offsets, nseq, silu, dbias != NULL);
            grad_reduce_add((float *)dw, partial, chunks, D * W, part_stride);
            if (dbias) grad_reduce_add((float *)dbias, partial + (size_t)D * W, chunks, D, part_stride);
        }
        if (dstate_in && W > 1 && N > 0)
            launch_kernel(conv_dstate_in_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0,
                          (float *)dstate_in, (const float *)NULL, (const bf16 *)dy, (const float *)dstate_out,
                          (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, N, T, D, W,
                          offsets, silu);
        return;
    }
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
        grad_reduce_add((float *)dw, partial, chunks, D * W, part_stride);
        if (dbias) grad_reduce_add((float *)dbias, partial + (size_t)D * W, chunks, D, part_stride);
    }
    if (dstate_in && W > 1 && N > 0)
        launch_kernel(conv_dstate_in_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0,
                      (float *)dstate_in, (const float *)da, (const bf16 *)dy, (const float *)dstate_out,
                      (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, (const float *)state_in, N, T, D, W,
                      offsets, silu);
}

extern "C" void cuda_short_conv_step(real *y, real *state, const real *x, const real *w, const real *bias, int N,
                                     int D, int W, int silu) {
    PROFILE("short_conv_step");
    if (D < 1 || W < 1 || W > CONV_MAX_W) die("cuda_short_conv_step: bad D=%d W=%d", D, W);
    if (N < 1) return;
    launch_kernel(conv_step_kernel, dim3((unsigned)(((size_t)N * D + 255) / 256)), dim3(256), 0, (bf16 *)y,
                  (float *)state, (const bf16 *)x, (const bf16 *)w, (const bf16 *)bias, N, D, W, silu);
}
