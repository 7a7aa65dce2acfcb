// The MoE router on bf16 tensors (model/ops/moe/router.c gives the equations; docs/hybrid.md,
// "Router forward" and "MoE backward", steps 5-6). logits, scores (N, E), weights (N, K),
// bias (E) bf16; sel (N, K) int. One thread per token: E is small (16..384) and the top-k
// scan is serial by definition (strict '>' in expert order, so ties keep the lower index).
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

__global__ void router_forward_kernel(int *sel, bf16 *weights, bf16 *scores, const bf16 *logits, const bf16 *bias,
                                      int N, int E, int K, int softmax, int renorm, double scale) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const bf16 *u = logits + (size_t)t * E;
    double m = -INFINITY, sum = 0.0;
    if (softmax) {
        for (int e = 0; e < E; e++) m = fmax(m, (double)__bfloat162float(u[e]));
        for (int e = 0; e < E; e++) sum += exp((double)__bfloat162float(u[e]) - m);
    }
    for (int e = 0; e < E; e++) scores[(size_t)t * E + e] = __float2bfloat16(score_of(u, e, softmax, m, sum));
    // top-K by K scans; a slot already taken is one of st[0..j)
    int *st = sel + (size_t)t * K;
    double S = 0.0;
    for (int j = 0; j < K; j++) {
        int best = -1;
        double ab = 0.0;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= st[i] == e;
            if (taken) continue;
            double a = (double)score_of(u, e, softmax, m, sum) + (bias ? (double)__bfloat162float(bias[e]) : 0.0);
            if (best < 0 || a > ab) best = e, ab = a;
        }
        st[j] = best;
        S += (double)score_of(u, best, softmax, m, sum);
    }
    double f = (renorm && K > 1) ? scale / (S + RENORM_EPS) : scale;
    for (int j = 0; j < K; j++)
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
    launch_kernel(router_forward_kernel, dim3(token_blocks(N)), dim3(128), 0, sel, (bf16 *)weights, (bf16 *)scores,
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
