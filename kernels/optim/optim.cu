// Optimizer steps on the device: AdamW (model/ops/optim/optim.h) and Muon (model/ops/optim/muon.h).
// State (moments, Muon momentum), master weights and the gradients read (model/backend.h,
// `grad_size`; docs/cuda.md, "Precision") are fp32; parameters are bf16,
// rounded to nearest even from the master after every step (so the master alone
// decides the trajectory and a checkpoint of it resumes bit for bit). The contract's
// `real` hyperparameters are spelled float here: CUDA exists only in the float build.
//
// Muon keeps its momentum in the form the scale rule picks (muon.h: sum for moonlight, EMA
// for keller). Its Newton-Schulz runs on bf16 operands with fp32 accumulation through cuBLASLt,
// all the blocks of a fused tensor (qkv: 3) as one strided batch:
//   X = U / (||U||_F + 1e-7) per block;  steps times:  A = X X^T,  B = b A + c A A,
//   X = a X + B X   (a tall block uses A = X^T X and X = a X + X B instead: the same
//   iteration on X^T, as the CPU's explicit transpose).
#include <math.h>

#include "kernels/common.cuh"
extern "C" {
#include "model/ops/optim/muon.h"
}

__device__ __forceinline__ void adamw_elem(bf16 *param, const float *grad, float *m, float *v, float *master, size_t i,
                                           float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                                           float bc1, float bc2) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.f - beta1) * g;
    float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master ? master[i] : __bfloat162float(param[i]);
    p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
    if (master) master[i] = p;
    param[i] = __float2bfloat16(p);
}

__global__ void adamw_kernel(bf16 *param, const float *grad, float *m, float *v, float *master, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float grad_scale, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        adamw_elem(param, grad, m, v, master, i, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
}

void cuda_adamw_update(real *param, const real *grad, float *m, float *v, float *master, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    PROFILE("adamw");
    if (!n) return;
    float bc1 = (float)(1.0 - pow((double)beta1, t)), bc2 = (float)(1.0 - pow((double)beta2, t));
    launch_kernel(adamw_kernel, grid_for(n, 256, 8), 256, 0, (bf16 *)param, (const float *)grad, m, v, master, n, lr,
        beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
}

// ---------------------------------------------------------------------------
// Multi-tensor AdamW: every segment of one step in one launch. The segment table is a
// kernel parameter (CUDA >= 12.1 takes up to 32 KB of them); a block takes chunks of
// ADAMW_CHUNK elements in turn and finds its segment by binary search over the chunk
// offsets. Each element's arithmetic is adamw_elem, as in the one-tensor kernel, so the
// results are the same bits.

#define ADAMW_MT_MAX 384
#define ADAMW_CHUNK 16384

struct AdamwMulti {
    int n;
    unsigned cstart[ADAMW_MT_MAX + 1];  // first chunk of each segment; cstart[n] = all chunks
    size_t off[ADAMW_MT_MAX];
    size_t len[ADAMW_MT_MAX];
    float lr[ADAMW_MT_MAX], wd[ADAMW_MT_MAX];
};

__global__ void adamw_multi_kernel(const __grid_constant__ AdamwMulti p, bf16 *param, const float *grad, float *m,
                                   float *v, float *master, float beta1, float beta2, float eps, float grad_scale,
                                   float bc1, float bc2) {
    const unsigned nchunks = p.cstart[p.n];
    for (unsigned c = blockIdx.x; c < nchunks; c += gridDim.x) {
        int lo = 0, hi = p.n - 1;  // the last segment with cstart <= c
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (p.cstart[mid] <= c) lo = mid;
            else hi = mid - 1;
        }
        const size_t first = (size_t)(c - p.cstart[lo]) * ADAMW_CHUNK;
        const size_t len = p.len[lo] - first < ADAMW_CHUNK ? p.len[lo] - first : ADAMW_CHUNK;
        const size_t base = p.off[lo] + first;
        const float lr = p.lr[lo], wd = p.wd[lo];
        for (size_t i = base + threadIdx.x; i < base + len; i += blockDim.x)
            adamw_elem(param, grad, m, v, master, i, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    }
}

void cuda_adamw_update_multi(real *param, const real *grad, float *m, float *v, float *master, int n_seg,
                             const size_t *off, const size_t *len, const float *lr, const float *wd, float beta1,
                             float beta2, float eps, float grad_scale, int t) {
    PROFILE("adamw");
    float bc1 = (float)(1.0 - pow((double)beta1, t)), bc2 = (float)(1.0 - pow((double)beta2, t));
    static AdamwMulti p;  // 12 KB: not on the stack
    for (int s0 = 0; s0 < n_seg; s0 += ADAMW_MT_MAX) {
        p.n = 0;
        size_t chunks = 0;
        for (int s = s0; s < n_seg && s < s0 + ADAMW_MT_MAX; s++) {
            if (!len[s]) continue;
            p.cstart[p.n] = (unsigned)chunks;
            p.off[p.n] = off[s];
            p.len[p.n] = len[s];
            p.lr[p.n] = lr[s];
            p.wd[p.n] = wd[s];
            chunks += (len[s] + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
            p.n++;
        }
        if (!p.n) continue;
        if (chunks > 0xffffffffu) die("adamw_update_multi: %zu chunks", chunks);
        p.cstart[p.n] = (unsigned)chunks;
        unsigned grid = (unsigned)(chunks < (size_t)g_cuda.sm_count * 8 ? chunks : (size_t)g_cuda.sm_count * 8);
        launch_kernel(adamw_multi_kernel, grid, 256, 0, p, (bf16 *)param, (const float *)grad, m, v, master, beta1,
            beta2, eps, grad_scale, bc1, bc2);
    }
}

// ---------------------------------------------------------------------------
// Muon

#define MUON_PART 64  // partial-sum blocks per matrix block for the Frobenius norm

// U from g and the updated momentum mi (muon.h): g + mu M in the sum form, (1 - mu) g + mu M
// in the EMA form (ema = 1), M without Nesterov. Both kernels below compute U through this,
// so the norm and the scaled X see the same U (the EMA form's FMA is spelled out: with two
// products either could be fused).
__device__ __forceinline__ float muon_u(float g, float mi, float mu, int nesterov, int ema) {
    if (!nesterov) return mi;
    if (ema) return __fmaf_rn(mu, mi, (1.f - mu) * g);
    return g + mu * mi;
}

// The momentum (g = grad_scale grad): M = mu M + g (sum form) or M = mu M + (1 - mu) g
// (EMA form, ema = 1); partial sums of U^2. grid (MUON_PART, n_blocks); block b covers
// elements [b*len, (b+1)*len).
__global__ void muon_momentum_kernel(double *partial, float *M, const float *grad, size_t len, float mu, int nesterov,
                                     int ema, float grad_scale) {
    size_t base = (size_t)blockIdx.y * len;
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x) {
        float g = grad_scale * grad[base + i];
        float mi;
        if (ema) mi = __fmaf_rn(mu, M[base + i], (1.f - mu) * g);
        else mi = mu * M[base + i] + g;
        M[base + i] = mi;
        float u = muon_u(g, mi, mu, nesterov, ema);
        s += (double)u * u;
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = s;
}

// inv[b] = 1 / (||U_b|| + eps), partials added in order
__global__ void muon_norm_kernel(float *inv, const double *partial, int parts) {
    int b = blockIdx.x;
    if (threadIdx.x) return;
    double s = 0.0;
    for (int i = 0; i < parts; i++) s += partial[b * parts + i];
    inv[b] = (float)(1.0 / (sqrt(s) + MUON_NS_EPS));
}

// X = bf16(U * inv[block]), U recomputed from the updated M (same values as above)
__global__ void muon_scale_kernel(bf16 *X, const float *M, const float *grad, const float *inv, size_t len, float mu,
                                  int nesterov, int ema, float grad_scale) {
    size_t base = (size_t)blockIdx.y * len;
    float s = inv[blockIdx.y];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x) {
        float g = grad_scale * grad[base + i];
        float mi = M[base + i];
        float u = muon_u(g, mi, mu, nesterov, ema);
        X[base + i] = __float2bfloat16(u * s);
    }
}

// W = W (1 - lr wd) - step O, on the master when there is one
__global__ void muon_apply_kernel(bf16 *param, float *master, const bf16 *O, size_t n, float decay, float step) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float w = master ? master[i] : __bfloat162float(param[i]);
        w = w * decay - step * __bfloat162float(O[i]);
        if (master) master[i] = w;
        param[i] = __float2bfloat16(w);
    }
}

void cuda_muon_update(real *param, const real *grad, float *M, float *master, int rows, int cols, int n_blocks,
                      float momentum, int nesterov, int ns_steps, int scale_rule, float lr, float weight_decay,
                      float grad_scale, real *work) {
    PROFILE("muon");
    (void)work;  // the backend's scratch holds the batched workspace
    if (rows <= 0 || cols <= 0) die("muon_update: bad shape (%d, %d)", rows, cols);
    if (n_blocks < 1 || rows % n_blocks) die("muon_update: %d rows do not split into %d equal blocks", rows, n_blocks);
    const int r = rows / n_blocks;
    const int tall = r > cols, m = tall ? cols : r;
    const size_t len = (size_t)r * cols, n = (size_t)rows * cols, mm = (size_t)m * m;
    // scratch: partial (double) | inv (float) | X | Y | A | Bm  (bf16), 256-byte aligned pieces
    size_t off_part = 0, off_inv = off_part + (((size_t)n_blocks * MUON_PART * 8 + 255) & ~(size_t)255);
    size_t off_x = off_inv + (((size_t)n_blocks * 4 + 255) & ~(size_t)255);
    size_t off_y = off_x + ((n * 2 + 255) & ~(size_t)255);
    size_t off_a = off_y + ((n * 2 + 255) & ~(size_t)255);
    size_t off_b = off_a + (((size_t)n_blocks * mm * 2 + 255) & ~(size_t)255);
    size_t total = off_b + (((size_t)n_blocks * mm * 2 + 255) & ~(size_t)255);
    char *s = (char *)scratch_get(total);
    double *partial = (double *)(s + off_part);
    float *inv = (float *)(s + off_inv);
    bf16 *X = (bf16 *)(s + off_x), *Y = (bf16 *)(s + off_y), *A = (bf16 *)(s + off_a), *Bm = (bf16 *)(s + off_b);

    const int ema = muon_momentum_form((MuonScaleRule)scale_rule) == MUON_MOMENTUM_EMA;
    dim3 grid(MUON_PART, n_blocks);
    launch_kernel(muon_momentum_kernel, grid, 256, 0, partial, M, (const float *)grad, len, momentum, nesterov, ema,
        grad_scale);
    launch_kernel(muon_norm_kernel, n_blocks, 32, 0, inv, partial, MUON_PART);
    launch_kernel(muon_scale_kernel, grid, 256, 0, X, M, (const float *)grad, inv, len, momentum, nesterov, ema,
        grad_scale);

    const float a = (float)MUON_NS_A, b = (float)MUON_NS_B, c = (float)MUON_NS_C;
    // row-major X (r, cols) is column-major Xc (cols, r), ld = cols
    for (int it = 0; it < ns_steps; it++) {
        if (!tall) {
            // A (r, r) = X X^T = Xc^T Xc
            gemm_bf16(1, 0, r, r, cols, X, cols, len, X, cols, len, NULL, A, r, mm, 1.f, 0.f, NULL, n_blocks);
            // Bm = c A A + b A
            gemm_bf16(0, 0, r, r, r, A, r, mm, A, r, mm, A, Bm, r, mm, c, b, NULL, n_blocks);
            // X' = a X + Bm X  ->  Xc' = a Xc + Xc Bm (Bm symmetric)
            gemm_bf16(0, 0, cols, r, r, X, cols, len, Bm, r, mm, X, Y, cols, len, 1.f, a, NULL, n_blocks);
        } else {
            // A (cols, cols) = X^T X = Xc Xc^T
            gemm_bf16(0, 1, cols, cols, r, X, cols, len, X, cols, len, NULL, A, cols, mm, 1.f, 0.f, NULL, n_blocks);
            gemm_bf16(0, 0, cols, cols, cols, A, cols, mm, A, cols, mm, A, Bm, cols, mm, c, b, NULL, n_blocks);
            // X' = a X + X Bm  ->  Xc' = a Xc + Bm Xc
            gemm_bf16(0, 0, cols, r, cols, Bm, cols, mm, X, cols, len, X, Y, cols, len, 1.f, a, NULL, n_blocks);
        }
        bf16 *t = X;
        X = Y;
        Y = t;
    }
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const float step = (float)((double)lr * muon_update_scale((MuonScaleRule)scale_rule, r, cols));
    launch_kernel(muon_apply_kernel, grid_for(n, 256, 8), 256, 0, (bf16 *)param, master, X, n, decay, step);
}
