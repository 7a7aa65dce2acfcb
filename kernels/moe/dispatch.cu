// Dropless dispatch on the device (model/ops/moe/dispatch.c gives the equations; docs/hybrid.md,
// "Dropless permutation and grouped expert FFN").
// Plan: a stable counting sort of the N*K slots by expert in three launches, no atomics:
//   1. chunk histograms: block b counts, per expert, the slots of chunk b (PLAN_CHUNK slots)
//      -> hist (nchunk, E) int (scratch);
//   2. one block of at most 8 warps: a warp per expert (in turn) scans its chunk counts (SCAN_PER_LANE chunks a lane in
//      order, then a warp scan of the lanes' sums): hist[b][e] becomes the number of expert-e
//      slots in the chunks before b (the chunks in order: stability); then one thread writes
//      offsets (E+1), the exclusive prefix of the experts' totals;
//   3. block b places its slots, one thread per expert walking the chunk in slot order from
//      row offsets[e] + hist[b][e].
// So perm lists each expert's slots in increasing slot order, exactly the reference's.
// sel entries outside [0, E) are not checked here (see balance.cu's moe_count).
// Integers throughout: any order of the additions gives the same plan.
// gather / combine: below, before their kernels.
#include "kernels/common.cuh"

#define PLAN_CHUNK 256

__global__ void plan_hist_kernel(int *hist, const int *sel, int NK, int E) {
    __shared__ int s[PLAN_CHUNK];
    const int b = blockIdx.x, n0 = b * PLAN_CHUNK, len = min(PLAN_CHUNK, NK - n0);
    for (int i = threadIdx.x; i < PLAN_CHUNK; i += blockDim.x) s[i] = i < len ? sel[n0 + i] : -1;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int c = 0;
        for (int i = 0; i < len; i++) c += s[i] == e;
        hist[(size_t)b * E + e] = c;
    }
}

#define SCAN_PER_LANE 8  // chunks a lane sums in order before the warp scan

// At most PLAN_SCAN_WARPS warps (a warp per expert, then the next expert): a block of a warp
// per expert up to 32 warps (1024 threads) asked for more registers than an SM has at E >= 32
// ("too many resources requested for launch" on the H200 at E = 64), and __launch_bounds__
// makes the compiler keep the kernel inside what the launch asks for.
#define PLAN_SCAN_WARPS 8
__global__ void __launch_bounds__(32 * PLAN_SCAN_WARPS) plan_scan_kernel(int *hist, int *offsets, int nchunk, int E) {
    DYNAMIC_SMEM(int, total);  // (E): each expert's slots
    const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
    for (int e = threadIdx.x >> 5; e < E; e += nwarp) {  // (the whole warp: the shuffles have every lane)
        int carry = 0;
        for (int b0 = 0; b0 < nchunk; b0 += 32 * SCAN_PER_LANE) {
            const int first = b0 + lane * SCAN_PER_LANE;
            int v[SCAN_PER_LANE], s = 0;
#pragma unroll
            for (int i = 0; i < SCAN_PER_LANE; i++) {
                v[i] = first + i < nchunk ? hist[(size_t)(first + i) * E + e] : 0;
                s += v[i];
            }
            int incl = s;  // inclusive scan of the lanes' sums
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int u = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += u;
            }
            int run = carry + incl - s;
#pragma unroll
            for (int i = 0; i < SCAN_PER_LANE; i++) {
                if (first + i < nchunk) hist[(size_t)(first + i) * E + e] = run;
                run += v[i];
            }
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0) total[e] = carry;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + total[e];
    }
}

__global__ void plan_place_kernel(int *perm, int *pos, const int *hist, const int *offsets, const int *sel, int NK,
                                  int E) {
    __shared__ int s[PLAN_CHUNK];
    const int b = blockIdx.x, n0 = b * PLAN_CHUNK, len = min(PLAN_CHUNK, NK - n0);
    for (int i = threadIdx.x; i < PLAN_CHUNK; i += blockDim.x) s[i] = i < len ? sel[n0 + i] : -1;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int p = offsets[e] + hist[(size_t)b * E + e];
        for (int i = 0; i < len; i++)
            if (s[i] == e) {
                perm[p] = n0 + i;
                pos[n0 + i] = p;
                p++;
            }
    }
}

void cuda_moe_dispatch_plan(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E) {
    PROFILE("moe_plan");
    const int NK = N * K, nchunk = (NK + PLAN_CHUNK - 1) / PLAN_CHUNK;
    if (E <= 0) die("moe dispatch: %d experts", E);
    if (NK == 0) {
        CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof(int) * (E + 1), g_cuda.stream));
        return;
    }
    int *hist = (int *)scratch_get(sizeof(int) * (size_t)nchunk * E);
    launch_kernel(plan_hist_kernel, dim3(nchunk), dim3(128), 0, hist, sel, NK, E);
    launch_kernel(plan_scan_kernel, dim3(1), dim3(32 * (E < PLAN_SCAN_WARPS ? E : PLAN_SCAN_WARPS)), sizeof(int) * E, hist, offsets, nchunk,
                  E);
    launch_kernel(plan_place_kernel, dim3(nchunk), dim3(128), 0, perm, pos, (const int *)hist, (const int *)offsets,
                  sel, NK, E);
}

// ---- gather / combine ----
// Two forms of each op, the same per-element arithmetic (so the same bits; dweights aside,
// below; the vector form of gather_backward and combine_forward is one kernel, sum_rows):
//   scalar: one block per destination row, threads over channels, 2-byte loads and stores;
//   vector: a warp per destination row (ROW_WARPS rows a block), each lane 8 channels (16
//           bytes) at a time, where C % 8 == 0 and every tensor is 16-byte aligned; a lane
//           issues the loads of up to ROW_UNROLL of its 8-channel pieces (lane, lane + 32, ...)
//           before it uses them, so several loads are in flight (C 768: all 3 of a lane's).
// The scalar form runs otherwise (C not a multiple of 8, C < 8, a misaligned tensor), or when
// a test forces it (cuda_moe_set_dispatch_vec(0)) to compare the vector form bit for bit.
// Every sum over j runs in j order in fp32 (the reference in double), outputs bf16.
// combine_backward's dweights[n] = dout[t] . yp[pos[n]] is a sum over channels in a fixed tree
// in each form (scalar: block_sum over the threads' strided partials; vector: each lane's
// channels in order, then warp_sum), so each form is deterministic run to run, but the two
// trees differ: their dweights agree to rounding, not bit for bit.
// The fused adds (model/ops/moe/moe.h): combine_forward's `add` and gather_backward's
// `accumulate` round the sum to bf16 first and then add in fp32 and round again, exactly as
// the separate combine + add_forward (or gather + add_inplace) did.
#define ROW_WARPS 8   // vector kernels: rows (one warp each) per 256-thread block
#define ROW_UNROLL 4  // vector kernels: a lane loads up to 4 of its 16-byte pieces before it uses them

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// xp[p] = x[perm[p] / K]
__global__ void gather_forward_kernel(bf16 *xp, const bf16 *x, const int *perm, int K, int C) {
    const size_t p = blockIdx.x;
    const bf16 *src = x + (size_t)(perm[p] / K) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) xp[p * C + c] = src[c];
}

__global__ void __launch_bounds__(32 * ROW_WARPS, 4)
    gather_forward_vec_kernel(bf16 *__restrict__ xp, const bf16 *__restrict__ x, const int *perm, int NK, int K, int C) {
    const int p = blockIdx.x * ROW_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31, nv = C / 8;
    if (p >= NK) return;
    const uint4 *src = reinterpret_cast<const uint4 *>(x + (size_t)(perm[p] / K) * C);
    uint4 *dst = reinterpret_cast<uint4 *>(xp + (size_t)p * C);
    for (int v0 = lane; v0 < nv; v0 += 32 * ROW_UNROLL) {
        uint4 r[ROW_UNROLL];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; u++)
            if (v0 + 32 * u < nv) r[u] = src[v0 + 32 * u];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; u++)
            if (v0 + 32 * u < nv) dst[v0 + 32 * u] = r[u];
    }
}

// dx[t] = sum_j dxp[pos[t K + j]]   (accumulate: dx[t] += that sum, rounded first)
__global__ void gather_backward_kernel(bf16 *dx, const bf16 *dxp, const int *pos, int K, int C, int accumulate) {
    const size_t t = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < K; j++) acc += __bfloat162float(dxp[(size_t)pos[t * K + j] * C + c]);
        if (accumulate) acc = __bfloat162float(dx[t * C + c]) + round_bf16(acc);
        dx[t * C + c] = __float2bfloat16(acc);
    }
}

// out[t] = sum_j w[t K + j] yp[pos[t K + j]]   (add: out[t] = that sum, rounded, + add[t])
__global__ void combine_forward_kernel(bf16 *out, const bf16 *yp, const bf16 *w, const int *pos, const bf16 *add,
                                       int K, int C) {
    const size_t t = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < K; j++)
            acc += __bfloat162float(w[t * K + j]) * __bfloat162float(yp[(size_t)pos[t * K + j] * C + c]);
        if (add) acc = round_bf16(acc) + __bfloat162float(add[t * C + c]);
        out[t * C + c] = __float2bfloat16(acc);
    }
}

// The vector form of both: out[t] = sum_j w_j src[pos[t K + j]] with w_j = w[t K + j], or 1
// when w is NULL (the gather's backward: acc += f, as its scalar kernel); with add (which may be
// out itself: the gather's accumulate) out[t] = that sum rounded to bf16 + add[t].
__global__ void __launch_bounds__(32 * ROW_WARPS, 4)
    sum_rows_vec_kernel(bf16 *out, const bf16 *__restrict__ src, const bf16 *w, const int *pos, const bf16 *add, int N,
                        int K, int C) {
    const int t = blockIdx.x * ROW_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31, nv = C / 8;
    if (t >= N) return;
    const int *pt = pos + (size_t)t * K;
    for (int v0 = lane; v0 < nv; v0 += 32 * ROW_UNROLL) {
        float acc[ROW_UNROLL][8], f[8];
        uint4 raw[ROW_UNROLL];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; u++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[u][i] = 0.f;
        for (int j = 0; j < K; j++) {
            const uint4 *row = reinterpret_cast<const uint4 *>(src + (size_t)pt[j] * C);
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++)
                if (v0 + 32 * u < nv) raw[u] = row[v0 + 32 * u];
            const float wj = w ? __bfloat162float(w[(size_t)t * K + j]) : 1.f;
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++) {
                if (v0 + 32 * u >= nv) break;
                unpack8(raw[u], f);
                if (w) {
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[u][i] += wj * f[i];
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[u][i] += f[i];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; u++) {
            const int v = v0 + 32 * u;
            if (v >= nv) break;
            if (add) {
                load8(add + (size_t)t * C + 8 * v, f);
#pragma unroll
                for (int i = 0; i < 8; i++) acc[u][i] = round_bf16(acc[u][i]) + f[i];
            }
            store8(out + (size_t)t * C + 8 * v, acc[u]);
        }
    }
}

// dyp[pos[n]] = w[n] dout[t]; dw[n] = dout[t] . yp[pos[n]] (block_sum: a fixed tree)
__global__ void combine_backward_kernel(bf16 *dyp, bf16 *dw, const bf16 *dout, const bf16 *yp, const bf16 *w,
                                        const int *pos, int K, int C) {
    const size_t t = blockIdx.x;
    const bf16 *dr = dout + t * C;
    for (int j = 0; j < K; j++) {
        const size_t n = t * K + j, p = (size_t)pos[n];
        const float wn = __bfloat162float(w[n]);
        float dot = 0.f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float d = __bfloat162float(dr[c]);
            dot += d * __bfloat162float(yp[p * C + c]);
            dyp[p * C + c] = __float2bfloat16(wn * d);
        }
        dot = block_sum(dot);
        if (threadIdx.x == 0) dw[n] = __float2bfloat16(dot);
    }
}

// the same; dw: each lane's channels in order (8 at a time), then warp_sum (a fixed tree)
__global__ void __launch_bounds__(32 * ROW_WARPS, 4)
    combine_backward_vec_kernel(bf16 *__restrict__ dyp, bf16 *dw, const bf16 *__restrict__ dout,
                                const bf16 *__restrict__ yp, const bf16 *w, const int *pos, int N, int K, int C) {
    const int t = blockIdx.x * ROW_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31, nv = C / 8;
    if (t >= N) return;  // (the whole warp: warp_sum below has every lane)
    const uint4 *dr = reinterpret_cast<const uint4 *>(dout + (size_t)t * C);
    for (int j = 0; j < K; j++) {
        const size_t n = (size_t)t * K + j, p = (size_t)pos[n];
        const uint4 *yr = reinterpret_cast<const uint4 *>(yp + p * C);
        const float wn = __bfloat162float(w[n]);
        float dot = 0.f;
        for (int v0 = lane; v0 < nv; v0 += 32 * ROW_UNROLL) {
            uint4 rd[ROW_UNROLL], ry[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++)
                if (v0 + 32 * u < nv) rd[u] = dr[v0 + 32 * u], ry[u] = yr[v0 + 32 * u];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++) {
                const int v = v0 + 32 * u;
                if (v >= nv) break;
                float d[8], y[8];
                unpack8(rd[u], d);
                unpack8(ry[u], y);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    dot += d[i] * y[i];
                    y[i] = wn * d[i];
                }
                store8(dyp + p * C + 8 * v, y);
            }
        }
        dot = warp_sum(dot);
        if (lane == 0) dw[n] = __float2bfloat16(dot);
    }
}

static inline int row_threads(int C) { return C >= 256 ? 256 : C > 64 ? 128 : 64; }

static int dispatch_vec_mode = 1;  // cuda_moe_set_dispatch_vec
static long dispatch_vec_launches;
extern "C" void cuda_moe_set_dispatch_vec(int on) { dispatch_vec_mode = on != 0; }
extern "C" long cuda_moe_dispatch_vec_launches(void) { return dispatch_vec_launches; }

// the vector kernels' conditions: C % 8 == 0 (so C >= 8 and every row 16-byte aligned) and
// every tensor (NULL: none) 16-byte aligned
static int rows_vec(int C, const void *a, const void *b, const void *c) {
    const int ok = dispatch_vec_mode && C % 8 == 0 && is_aligned16(a) && is_aligned16(b) && (!c || is_aligned16(c));
    dispatch_vec_launches += ok;
    return ok;
}
static inline unsigned row_blocks(int rows) { return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS); }

void cuda_moe_gather_forward(real *xp, const real *x, const int *perm, int N, int K, int C) {
    PROFILE("moe_gather_fwd");
    const int NK = N * K;
    if (NK == 0 || C == 0) return;
    if (rows_vec(C, xp, x, NULL))
        launch_kernel(gather_forward_vec_kernel, dim3(row_blocks(NK)), dim3(32 * ROW_WARPS), 0, (bf16 *)xp,
                      (const bf16 *)x, perm, NK, K, C);
    else
        launch_kernel(gather_forward_kernel, dim3(NK), dim3(row_threads(C)), 0, (bf16 *)xp, (const bf16 *)x, perm, K,
                      C);
}

void cuda_moe_gather_backward(real *dx, const real *dxp, const int *pos, int N, int K, int C, int accumulate) {
    PROFILE("moe_gather_bwd");
    if (N == 0 || C == 0) return;
    if (rows_vec(C, dx, dxp, NULL))
        launch_kernel(sum_rows_vec_kernel, dim3(row_blocks(N)), dim3(32 * ROW_WARPS), 0, (bf16 *)dx, (const bf16 *)dxp,
                      (const bf16 *)NULL, pos, accumulate ? (const bf16 *)dx : (const bf16 *)NULL, N, K, C);
    else
        launch_kernel(gather_backward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)dx, (const bf16 *)dxp, pos, K,
                      C, accumulate);
}

void cuda_moe_combine_forward(real *out, const real *yp, const real *weights, const int *pos, const real *add, int N,
                              int K, int C) {
    PROFILE("moe_combine_fwd");
    if (N == 0 || C == 0) return;
    if (rows_vec(C, out, yp, add))
        launch_kernel(sum_rows_vec_kernel, dim3(row_blocks(N)), dim3(32 * ROW_WARPS), 0, (bf16 *)out, (const bf16 *)yp,
                      (const bf16 *)weights, pos, (const bf16 *)add, N, K, C);
    else
        launch_kernel(combine_forward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)out, (const bf16 *)yp,
                      (const bf16 *)weights, pos, (const bf16 *)add, K, C);
}

void cuda_moe_combine_backward(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                               const int *pos, int N, int K, int C) {
    PROFILE("moe_combine_bwd");
    if (N == 0) return;
    if (C > 0 && rows_vec(C, dyp, dout, yp))
        launch_kernel(combine_backward_vec_kernel, dim3(row_blocks(N)), dim3(32 * ROW_WARPS), 0, (bf16 *)dyp,
                      (bf16 *)dweights, (const bf16 *)dout, (const bf16 *)yp, (const bf16 *)weights, pos, N, K, C);
    else
        launch_kernel(combine_backward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)dyp, (bf16 *)dweights,
                      (const bf16 *)dout, (const bf16 *)yp, (const bf16 *)weights, pos, K, C);
}
