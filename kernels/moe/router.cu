// The MoE router on bf16 tensors (model/ops/moe/router.c gives the equations; docs/hybrid.md,
// "Router forward" and "MoE backward", steps 5-6). logits, scores (N, E), weights (N, K),
// bias (E) bf16; sel (N, K) int. The forward: a warp per token (below); the backward: a thread
// per token. The top-k is the serial scan's (strict '>' in expert order, so ties keep the lower
// index).
// The scores are computed in double and rounded to float as the CPU reference does, and the
// selection key uses that float (not the stored bf16), so sel matches the reference exactly
// wherever the float scores are not tied; the stored scores are bf16.
#include "kernels/common.cuh"

#define RENORM_EPS 1e-20

__device__ __forceinline__ double sigmoid_d(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

// the float score of expert e (softmax: m, sum of the token's row)
__device__ __forceinline__ float score_of(const bf16 *u, int e, int softmax, double m, double sum) {
    double x = (double)__bfloat162float(u[e]);
    return softmax ? (float)(exp(x - m) / sum) : (float)sigmoid_d(x);
}

// One warp per token, lane l taking experts l, l + 32, ...: the scores once, then top-K by K
// warp-wide scans with the serial scan's result (the old kernel: one thread per token, scanning
// every expert K times; 0.525 ms at E 64, top-8, 16384 tokens on the H200). The serial scan
// picks the first untaken expert, then any later one whose key is strictly larger: the largest
// key, ties to the lower index, unless the first untaken key is NaN (a NaN is never larger, so it
// stays). So the picks come in the order (key descending, index ascending) among the non-NaN
// keys, and a NaN only when it is the lowest untaken index. Untaken is therefore known without a
// list: a non-NaN key after the last non-NaN pick in that order, a NaN key past the last NaN
// pick. Each scan: every lane its best untaken non-NaN (strict '>' in index order) and its first
// untaken expert, then the warp's best (ties to the lower index) and first; the pick is the first
// if its key is NaN, else the best. Keys are recomputed each scan (any E, no per-expert storage).
// S (the renormalisation's sum) adds the picks' scores in pick order and the softmax's sum adds
// exp(x - m) in expert order, each lane doing the same adds (the terms passed round by shuffles),
// so every output is the serial kernel's, bit for bit.
__device__ __forceinline__ double router_key(const bf16 *u, const bf16 *bias, int e, int softmax, double m,
                                             double sum) {
    return (double)score_of(u, e, softmax, m, sum) + (bias ? (double)__bfloat162float(bias[e]) : 0.0);
}

__global__ void router_forward_kernel(int *sel, bf16 *weights, bf16 *scores, const bf16 *logits, const bf16 *bias,
                                      int N, int E, int K, int softmax, int renorm, double scale) {
    const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (t >= N) return;  // (a whole warp: blockDim.x is a multiple of 32)
    const unsigned all = 0xffffffffu;
    const bf16 *u = logits + (size_t)t * E;
    double m = -INFINITY, sum = 0.0;
    if (softmax) {
        for (int e = lane; e < E; e += 32) m = fmax(m, (double)__bfloat162float(u[e]));
        for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(all, m, o));
        for (int e0 = 0; e0 < E; e0 += 32) {  // in expert order: lane l's term of this row of 32, l = 0..31
            const int e = e0 + lane;
            const double x = e < E ? exp((double)__bfloat162float(u[e]) - m) : 0.0;
            for (int l = 0; l < 32 && e0 + l < E; l++) sum += __shfl_sync(all, x, l);
        }
    }
    for (int e = lane; e < E; e += 32) scores[(size_t)t * E + e] = __float2bfloat16(score_of(u, e, softmax, m, sum));
    int *st = sel + (size_t)t * K;
    double S = 0.0, last_k = 0.0;
    int last_e = -1, last_nan = -1;  // the last non-NaN pick (key, index; -1: none yet), the last NaN pick
    for (int j = 0; j < K; j++) {
        double bk = 0.0;
        int be = E, first = E, first_nan = 0;  // (E: none)
        for (int e = lane; e < E; e += 32) {
            const double a = router_key(u, bias, e, softmax, m, sum);
            const bool nan = a != a;
            const bool untaken = nan ? e > last_nan : last_e < 0 || a < last_k || (a == last_k && e > last_e);
            if (!untaken) continue;
            if (first == E) first = e, first_nan = nan;
            if (!nan && (be == E || a > bk)) bk = a, be = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const double ok = __shfl_xor_sync(all, bk, o);
            const int oe = __shfl_xor_sync(all, be, o), of = __shfl_xor_sync(all, first, o),
                      on = __shfl_xor_sync(all, first_nan, o);
            if (oe != E && (be == E || ok > bk || (ok == bk && oe < be))) bk = ok, be = oe;
            if (of < first) first = of, first_nan = on;
        }
        const int best = first_nan ? first : be;
        if (first_nan) last_nan = best;
        else last_k = bk, last_e = best;
        if (lane == (j & 31)) st[j] = best;  // (read back below by the same lane)
        S += (double)score_of(u, best, softmax, m, sum);
    }
    const double f = (renorm && K > 1) ? scale / (S + RENORM_EPS) : scale;
    for (int j = lane; j < K; j += 32)
        weights[(size_t)t * K + j] = __float2bfloat16((float)(f * score_of(u, st[j], softmax, m, sum)));
}

__global__ void router_weights_backward_kernel(bf16 *dscores, const bf16 *dweights, const bf16 *scores,
                                               const int *sel, int N, int E, int K, int renorm, double scale) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const bf16 *s = scores + (size_t)t * E, *dw = dweights + (size_t)t * K;
    const int *st = sel + (size_t)t * K;
    bf16 *ds = dscores + (size_t)t * E;
    for (int e = 0; e < E; e++) ds[e] = __float2bfloat16(0.f);
    if (renorm && K > 1) {
        double S = RENORM_EPS, dot = 0.0;
        for (int j = 0; j < K; j++) S += __bfloat162float(s[st[j]]);
        for (int j = 0; j < K; j++) dot += (double)__bfloat162float(dw[j]) * __bfloat162float(s[st[j]]);
        for (int j = 0; j < K; j++)
            ds[st[j]] = __float2bfloat16((float)(scale / S * ((double)__bfloat162float(dw[j]) - dot / S)));
    } else {
        for (int j = 0; j < K; j++) ds[st[j]] = __float2bfloat16((float)(scale * __bfloat162float(dw[j])));
    }
}

__global__ void router_scores_backward_kernel(bf16 *dlogits, const bf16 *dscores, const bf16 *scores, int N, int E,
                                              int softmax) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const bf16 *s = scores + (size_t)t * E, *ds = dscores + (size_t)t * E;
    bf16 *du = dlogits + (size_t)t * E;
    if (softmax) {
        float dot = 0.f;
        for (int e = 0; e < E; e++) dot += __bfloat162float(ds[e]) * __bfloat162float(s[e]);
        for (int e = 0; e < E; e++)
            du[e] = __float2bfloat16(__bfloat162float(s[e]) * (__bfloat162float(ds[e]) - dot));
    } else {
        for (int e = 0; e < E; e++) {
            float sv = __bfloat162float(s[e]);
            du[e] = __float2bfloat16(__bfloat162float(ds[e]) * sv * (1.f - sv));
        }
    }
}

static inline unsigned token_blocks(int N) { return (unsigned)((N + 127) / 128); }

void cuda_router_forward(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N, int E,
                         int K, RouterScoreFn fn, int renorm, double scale) {
    PROFILE("moe_router_fwd");
    if (K < 1 || K > E) die("router: top-k %d must be in [1, %d]", K, E);
    if (N <= 0) return;
    launch_kernel(router_forward_kernel, dim3((unsigned)((N + 3) / 4)), dim3(128), 0, sel, (bf16 *)weights,
                  (bf16 *)scores,
                  (const bf16 *)logits, (const bf16 *)bias, N, E, K, (int)(fn == ROUTER_SOFTMAX), renorm, scale);
}

void cuda_router_weights_backward(real *dscores, const real *dweights, const real *scores, const int *sel, int N,
                                  int E, int K, int renorm, double scale) {
    PROFILE("moe_router_wbwd");
    if (N <= 0) return;
    launch_kernel(router_weights_backward_kernel, dim3(token_blocks(N)), dim3(128), 0, (bf16 *)dscores,
                  (const bf16 *)dweights, (const bf16 *)scores, sel, N, E, K, renorm, scale);
}

void cuda_router_scores_backward(real *dlogits, const real *dscores, const real *scores, int N, int E,
                                 RouterScoreFn fn) {
    PROFILE("moe_router_sbwd");
    if (N <= 0) return;
    launch_kernel(router_scores_backward_kernel, dim3(token_blocks(N)), dim3(128), 0, (bf16 *)dlogits,
                  (const bf16 *)dscores, (const bf16 *)scores, N, E, (int)(fn == ROUTER_SOFTMAX));
}
