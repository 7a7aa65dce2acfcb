// Block Attention Residuals (docs/hybrid.md, "Block Attention Residuals"). One op mixes n
// source tensors per token with a softmax over depth; the pseudo-query w and norm weight
// gamma are per op.
// Forward (docs/hybrid.md, "AttnRes op forward"), per token, in double:
//   q = w * gamma;  rho_i = (mean_c V_i^2 + eps)^(-1/2);  z_i = rho_i (V_i . q)
//   p = softmax_i(z);  out = sum_i p_i V_i                 (saves p, z, rho)
// Backward (docs/hybrid.md, "AttnRes op backward"):
//   pi_i = dout . V_i;  dz_i = p_i (pi_i - sum_j p_j pi_j)
//   dV_i = p_i dout + dz_i rho_i q - (dz_i z_i rho_i^2 / C) V_i        (accumulated)
//   dq   = sum_tokens sum_i dz_i rho_i V_i;  dw += dq * gamma;  dgamma += dq * w
// The backward first runs over tokens (dV, and dz_i rho_i into `work`), then over channels
// for dq, summing tokens in order (deterministic, no atomics).
#include <math.h>

#include "model/ops/attnres/attnres.h"
#include "base/util.h"

void cpu_attnres_forward(real *out, real *probs, real *logits, real *rstd, const real *const *srcs, int n,
                         const real *w, const real *gamma, int N, int C, double eps) {
    if (n < 1) die("attnres: needs at least one source (got %d)", n);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        double z[n], m = -INFINITY;
        for (int i = 0; i < n; i++) {
            const real *V = srcs[i] + (size_t)t * C;
            double ss = 0.0, vq = 0.0;
            for (int c = 0; c < C; c++) {
                ss += (double)V[c] * V[c];
                vq += (double)V[c] * ((double)w[c] * gamma[c]);
            }
            double rho = 1.0 / sqrt(ss / C + eps);
            z[i] = rho * vq;
            if (z[i] > m) m = z[i];
            rstd[(size_t)t * n + i] = (real)rho;
            logits[(size_t)t * n + i] = (real)z[i];
        }
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += (z[i] = exp(z[i] - m));
        for (int i = 0; i < n; i++) probs[(size_t)t * n + i] = (real)(z[i] / sum);
        real *o = out + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int i = 0; i < n; i++) acc += (z[i] / sum) * srcs[i][(size_t)t * C + c];
            o[c] = (real)acc;
        }
    }
}

void cpu_attnres_backward(real *const *dsrcs, real *dw, real *dgamma, real *work, const real *dout,
                          const real *const *srcs, int n, const real *w, const real *gamma, const real *probs,
                          const real *logits, const real *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const real *dh = dout + (size_t)t * C;
        const real *p = probs + (size_t)t * n, *z = logits + (size_t)t * n, *rho = rstd + (size_t)t * n;
        double pi[n], mean = 0.0;
        for (int i = 0; i < n; i++) {
            const real *V = srcs[i] + (size_t)t * C;
            double s = 0.0;
            for (int c = 0; c < C; c++) s += (double)dh[c] * V[c];
            pi[i] = s;
            mean += (double)p[i] * s;
        }
        for (int i = 0; i < n; i++) {
            double dz = p[i] * (pi[i] - mean);
            work[(size_t)t * n + i] = (real)(dz * rho[i]);
            if (!dsrcs[i]) continue;
            const real *V = srcs[i] + (size_t)t * C;
            real *dV = dsrcs[i] + (size_t)t * C;
            double a = dz * rho[i], b = dz * z[i] * rho[i] * rho[i] / C;
            for (int c = 0; c < C; c++)
                dV[c] += (real)(p[i] * dh[c] + a * ((double)w[c] * gamma[c]) - b * V[c]);
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        double dq = 0.0;
        for (int t = 0; t < N; t++)
            for (int i = 0; i < n; i++) dq += (double)work[(size_t)t * n + i] * srcs[i][(size_t)t * C + c];
        dw[c] += (real)(dq * gamma[c]);
        dgamma[c] += (real)(dq * w[c]);
    }
}

int attnres_num_blocks(int n_layer, int block_size) { return (n_layer - 1) / block_size + 1; }

AttnResPlan attnres_plan(AttnResSite site, int layer, int block_size, int n_layer) {
    if (block_size < 1) die("attnres: block size %d must be >= 1", block_size);
    if (n_layer < 1 || (site != ATTNRES_OUT && (layer < 0 || layer >= n_layer)))
        die("attnres: layer %d out of range [0, %d)", layer, n_layer);
    AttnResPlan p = {0, 1, 0, 0, 0};
    switch (site) {
    case ATTNRES_ATTN:
        p.seal = layer % block_size == 0;
        // blocks sealed before this layer: at layers 0, S, ..., strictly before `layer`
        p.n_blocks = layer == 0 ? 0 : (layer - 1) / block_size + 1;
        p.identity = layer == 0;
        break;
    case ATTNRES_FFN: p.n_blocks = layer / block_size + 1; break;
    case ATTNRES_OUT: p.n_blocks = attnres_num_blocks(n_layer, block_size); break;
    }
    p.n_sources = p.n_blocks + p.has_partial;
    return p;
}
