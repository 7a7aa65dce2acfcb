// MoE balancing on the device (model/ops/moe/balance.c gives the equations; docs/hybrid.md,
// "Auxiliary balance losses" and "Aux-loss-free bias balancing"): the DSV3 sequence-wise aux
// loss (forward: the loss to the host, one synchronisation; backward: += into the bf16
// dscores), the expert counts (counts: E longs, +=) and the sign bias update. Every floating
// sum runs in a fixed order (one thread per expert over the tokens in order, or thread 0 over
// the experts), in double as the reference: no floating atomics, bit-identical run to run
// (moe_count adds integers with atomics: exact in any order).
#include "kernels/common.cuh"

// per sequence q (one block): g[e] = #{t in q: e in sel_t} (double), then, thread per
// expert, P_e = sum_t s_te / z_t / L in token order; z_t = sum_e s_te in expert order
// (zt: N doubles, from token_sums_kernel). part[q] = alpha sum_e E/(K L) cnt_e P_e.
__global__ void token_sums_kernel(double *zt, const bf16 *scores, int N, int E) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    double z = 0.0;
    for (int e = 0; e < E; e++) z += __bfloat162float(scores[(size_t)t * E + e]);
    zt[t] = z;
}

__device__ double seq_count(const int *sel, int q, int L, int K, int e) {
    double c = 0.0;
    for (size_t n = (size_t)q * L * K; n < (size_t)(q + 1) * L * K; n++) c += sel[n] == e;
    return c;
}

__global__ void aux_loss_forward_kernel(double *part, const double *zt, const bf16 *scores, const int *sel, int E,
                                        int K, int L, double alpha) {
    DYNAMIC_SMEM(double, term);  // (E): cnt_e P_e
    const int q = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double P = 0.0;
        for (int t = q * L; t < (q + 1) * L; t++) P += __bfloat162float(scores[(size_t)t * E + e]) / zt[t] / L;
        term[e] = seq_count(sel, q, L, K, e) * P;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double l = 0.0;
        for (int e = 0; e < E; e++) l += (double)E / ((double)K * L) * term[e];
        part[q] = alpha * l;
    }
}

// ds_te += (g_e - sum_e' g_e' s_te' / z_t) / z_t, g_e = dloss alpha E/(K L) cnt_e / L / nseq;
// block per sequence, thread per token
__global__ void aux_loss_backward_kernel(bf16 *dscores, const double *zt, const bf16 *scores, const int *sel, int E,
                                         int K, int L, double coef) {
    DYNAMIC_SMEM(double, g);  // (E)
    const int q = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) g[e] = coef * seq_count(sel, q, L, K, e);
    __syncthreads();
    for (int t = q * L + threadIdx.x; t < (q + 1) * L; t += blockDim.x) {
        const bf16 *s = scores + (size_t)t * E;
        bf16 *ds = dscores + (size_t)t * E;
        double z = zt[t], gs = 0.0;
        for (int e = 0; e < E; e++) gs += g[e] * __bfloat162float(s[e]) / z;
        for (int e = 0; e < E; e++)
            ds[e] = __float2bfloat16(__bfloat162float(ds[e]) + (float)((g[e] - gs) / z));
    }
}

static void check_seq(int N, int L) {
    if (L <= 0 || N % L) die("seq aux loss: N = %d is not a multiple of the sequence length %d", N, L);
}

double cuda_moe_aux_loss_forward(const real *scores, const int *sel, int N, int E, int K, int L, double alpha) {
    PROFILE("moe_aux_fwd");
    check_seq(N, L);
    const int nseq = N / L;
    double *zt = (double *)scratch_get(sizeof(double) * ((size_t)N + nseq));
    double *part = zt + N;
    launch_kernel(token_sums_kernel, dim3((N + 127) / 128), dim3(128), 0, zt, (const bf16 *)scores, N, E);
    launch_kernel(aux_loss_forward_kernel, dim3(nseq), dim3(128), sizeof(double) * E, part, (const double *)zt,
                  (const bf16 *)scores, sel, E, K, L, alpha);
    double *h = (double *)xmalloc(sizeof(double) * nseq);
    CUDA_CHECK(cudaMemcpyAsync(h, part, sizeof(double) * nseq, cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    double total = 0.0;
    for (int q = 0; q < nseq; q++) total += h[q];
    free(h);
    return total / nseq;
}

void cuda_moe_aux_loss_backward(real *dscores, const real *scores, const int *sel, int N, int E, int K, int L,
                                double alpha, double dloss) {
    PROFILE("moe_aux_bwd");
    check_seq(N, L);
    const int nseq = N / L;
    double *zt = (double *)scratch_get(sizeof(double) * (size_t)N);
    launch_kernel(token_sums_kernel, dim3((N + 127) / 128), dim3(128), 0, zt, (const bf16 *)scores, N, E);
    const double coef = dloss * alpha * ((double)E / ((double)K * L)) / L / nseq;
    launch_kernel(aux_loss_backward_kernel, dim3(nseq), dim3(128), sizeof(double) * E, (bf16 *)dscores,
                  (const double *)zt, (const bf16 *)scores, sel, E, K, L, coef);
}

// counts[e] += #{n: sel[n] == e}: a histogram in shared memory per block (grid-stride over
// the slots, shared atomics), then one 64-bit atomic add per block and expert into counts.
// Integers: exact in any order, so the counts are the same run to run. (It was a block per
// expert, each reading all N*K selections: 16 blocks on an H200 of 132 SMs, 0.18 ms at
// N*K = 131072.) Entries outside [0, E) are not counted (the reference dies on them; sel
// comes from router_forward, which never writes one, and checking here would cost a
// synchronisation).
static_assert(sizeof(long) == sizeof(unsigned long long), "counts: 64-bit long");

__global__ void moe_count_kernel(long *counts, const int *sel, long NK, int E) {
    DYNAMIC_SMEM(int, hist);  // (E): this block's counts (a block sees fewer than 2^31 slots)
    for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
    __syncthreads();
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < NK; n += (long)gridDim.x * blockDim.x) {
        const int s = sel[n];
        if (s >= 0 && s < E) atomicAdd(&hist[s], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        if (hist[e]) atomicAdd(reinterpret_cast<unsigned long long *>(counts + e), (unsigned long long)hist[e]);
}

void cuda_moe_count(long *counts, const int *sel, int N, int K, int E) {
    PROFILE("moe_count");
    const long NK = (long)N * K;
    if (E <= 0 || NK == 0) return;
    // ~8 slots a thread: 64 blocks of 256 at N*K = 131072 (64 x 16 global atomics)
    launch_kernel(moe_count_kernel, dim3(grid_for((size_t)(NK + 7) / 8, 256, 2)), dim3(256), sizeof(int) * E, counts,
                  sel, NK, E);
}

// b_e += rate sign(mean - c_e) - mean_e'(that), one thread (E is small); master: the fp32
// copy is updated and bias = bf16(master), else bias (bf16) directly
__global__ void moe_bias_update_kernel(bf16 *bias, float *master, const long *counts, int E, double rate) {
    if (threadIdx.x != 0) return;
    double mean = 0.0, umean = 0.0;
    for (int e = 0; e < E; e++) mean += (double)counts[e];
    mean /= E;
    for (int e = 0; e < E; e++) {
        double d = mean - (double)counts[e];
        umean += rate * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
    }
    umean /= E;
    for (int e = 0; e < E; e++) {
        double d = mean - (double)counts[e];
        double upd = rate * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) - umean;
        if (master) {
            master[e] = (float)((double)master[e] + upd);
            bias[e] = __float2bfloat16(master[e]);
        } else {
            bias[e] = __float2bfloat16((float)((double)__bfloat162float(bias[e]) + upd));
        }
    }
}

void cuda_moe_bias_update(real *bias, float *master, const long *counts, int E, double rate) {
    PROFILE("moe_bias_update");
    if (E <= 0) return;
    launch_kernel(moe_bias_update_kernel, dim3(1), dim3(32), 0, (bf16 *)bias, master, counts, E, rate);
}
