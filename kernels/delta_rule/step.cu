// Single-token decode step of KDA / GDN / DeltaNet on CUDA (docs/delta-rule.md, "Decode
// steps"; the recurrence of "Kimi Delta Attention (KDA)"), index form per value column j:
//   S~[i][j] = e^{g_i} S[i][j];  d_j = beta (v_j - sum_i k_i S~[i][j]);
//   S[i][j] = S~[i][j] + k_i d_j;  o_j = scale sum_i q_i S[i][j]
// Column j of the state depends on nothing but column j, so one thread owns a column: one
// block per (sequence, head), the state (N,H,K,V) fp32 read twice and written once, in place.
#include "kernels/delta_rule/chunk.cuh"

#define STEP_THREADS 128

__global__ void __launch_bounds__(STEP_THREADS)
    dr_step_kernel(bf16 *o, float *state, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                   const bf16 *beta, int gate, float scale, int H, int K, int V) {
    const int h = blockIdx.y, tid = threadIdx.x;
    const size_t task = (size_t)blockIdx.x * H + h;  // (N, H) row
    __shared__ float qs[DR_MAX_DIM], ks[DR_MAX_DIM], es[DR_MAX_DIM];
    for (int i = tid; i < K; i += STEP_THREADS) {
        qs[i] = __bfloat162float(q[task * K + i]);
        ks[i] = __bfloat162float(k[task * K + i]);
        es[i] = gate == DRG_CHANNEL ? expf(__bfloat162float(g[task * K + i]))
                : gate == DRG_HEAD  ? expf(__bfloat162float(g[task]))
                                    : 1.f;
    }
    __syncthreads();
    const float b = __bfloat162float(beta[task]);
    float *S = state + task * K * V;
    for (int j = tid; j < V; j += STEP_THREADS) {
        float p = 0.f;
        for (int i = 0; i < K; i++) p += ks[i] * (es[i] * S[(size_t)i * V + j]);
        const float d = b * (__bfloat162float(v[task * V + j]) - p);
        float acc = 0.f;
        for (int i = 0; i < K; i++) {
            const float sij = es[i] * S[(size_t)i * V + j] + ks[i] * d;
            S[(size_t)i * V + j] = sij;
            acc += qs[i] * sij;
        }
        o[task * V + j] = __float2bfloat16(scale * acc);
    }
}

extern "C" void cuda_delta_step(LinearKind kind, real *o, real *state, const real *q, const real *k, const real *v,
                                const real *g, const real *beta, real scale, int N, int H, int K, int V) {
    PROFILE("delta_step");
    if (kind != LINEAR_KDA && kind != LINEAR_GDN && kind != LINEAR_DELTANET) die("delta_step: bad kind %d", (int)kind);
    if (K < 1 || K > DR_MAX_DIM || V < 1 || V > DR_MAX_DIM)
        die("delta_step: K = %d, V = %d: the CUDA delta-rule kernels take head dims 1..%d", K, V, DR_MAX_DIM);
    if (N <= 0) return;
    launch_kernel(dr_step_kernel, dim3(N, H), dim3(STEP_THREADS), 0, (bf16 *)o, (float *)state, (const bf16 *)q,
                  (const bf16 *)k, (const bf16 *)v, (const bf16 *)g, (const bf16 *)beta, dr_gate_of(kind), scale, H,
                  K, V);
}
