// MLA pieces that are not matmuls (docs/hybrid.md, "MLA parameters" to "MLA backward, in
// order", and "Absorbed (MQA-style) decode form").
//  - split of kv_a's output [c | k_rope] and its backward (concatenation; docs/hybrid.md,
//    "MLA backward, in order", step 7)
//  - assembly of the per-head key [k_nope,h | k_rope] with the rope key shared by all heads,
//    and its backward: the shared part's gradient is the sum over heads (docs/hybrid.md,
//    "MLA backward, in order", step 4)
//  - the absorbed (MQA-style) attention for decoding from the latent cache (docs/hybrid.md,
//    "Absorbed (MQA-style) decode form")
#include <math.h>

#include "model/ops/mla/mla.h"

void cpu_mla_split_kv_forward(real *c, real *kr, const real *kv, int N, int r, int dr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *src = kv + (size_t)n * (r + dr);
        for (int i = 0; i < r; i++) c[(size_t)n * r + i] = src[i];
        for (int i = 0; i < dr; i++) kr[(size_t)n * dr + i] = src[r + i];
    }
}

void cpu_mla_split_kv_backward(real *dkv, const real *dc, const real *dkr, int N, int r, int dr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *dst = dkv + (size_t)n * (r + dr);
        for (int i = 0; i < r; i++) dst[i] = dc[(size_t)n * r + i];
        for (int i = 0; i < dr; i++) dst[r + i] = dkr[(size_t)n * dr + i];
    }
}

void cpu_mla_build_k_forward(real *k, const real *e, const real *kr, int N, int NH, int dn, int dv, int dr) {
    const int de = dn + dv, dk = dn + dr;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < NH; h++) {
            const real *eh = e + ((size_t)n * NH + h) * de;
            real *kh = k + ((size_t)n * NH + h) * dk;
            for (int i = 0; i < dn; i++) kh[i] = eh[i];               // k_nope,h
            for (int i = 0; i < dr; i++) kh[dn + i] = kr[(size_t)n * dr + i];  // shared k_rope
        }
    }
}

void cpu_mla_build_k_backward(real *de, real *dkr, const real *dk, int N, int NH, int dn, int dv, int dr) {
    const int dE = dn + dv, dK = dn + dr;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < dr; i++) {
            double s = 0.0;  // dk_rope = sum over heads, heads in order
            for (int h = 0; h < NH; h++) s += dk[((size_t)n * NH + h) * dK + dn + i];
            dkr[(size_t)n * dr + i] = (real)s;
        }
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < dn; i++) de[((size_t)n * NH + h) * dE + i] = dk[((size_t)n * NH + h) * dK + i];
    }
}

void cpu_mla_absorbed_attention(real *out, const real *q, const real *cache, const real *w_kvb, int Nq, int Tc,
                                int NH, int dn, int dr, int dv, int r, double scale) {
    const int dqk = dn + dr, dc = r + dr;
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < Nq; i++) {
        for (int h = 0; h < NH; h++) {
            const real *qh = q + ((size_t)i * NH + h) * dqk;
            const real *wuk = w_kvb + (size_t)h * (dn + dv) * r;  // (dn, r)
            const real *wuv = wuk + (size_t)dn * r;                // (dv, r)
            // qt = [W_UK^T q_nope | q_rope]
            double qt[dc];
            for (int c = 0; c < r; c++) qt[c] = 0.0;
            for (int a = 0; a < dn; a++)
                for (int c = 0; c < r; c++) qt[c] += (double)qh[a] * wuk[(size_t)a * r + c];
            for (int c = 0; c < dr; c++) qt[r + c] = qh[dn + c];
            int last = Tc - Nq + i;  // causal: cache rows 0 .. last
            double m = -INFINITY;
            for (int t = 0; t <= last; t++) {
                const real *kt = cache + (size_t)t * dc;
                double s = 0.0;
                for (int c = 0; c < dc; c++) s += qt[c] * kt[c];
                if (scale * s > m) m = scale * s;
            }
            double ctx[r], sum = 0.0;
            for (int c = 0; c < r; c++) ctx[c] = 0.0;
            for (int t = 0; t <= last; t++) {
                const real *kt = cache + (size_t)t * dc;
                double s = 0.0;
                for (int c = 0; c < dc; c++) s += qt[c] * kt[c];
                double p = exp(scale * s - m);
                sum += p;
                for (int c = 0; c < r; c++) ctx[c] += p * kt[c];  // values = chat_t
            }
            real *o = out + ((size_t)i * NH + h) * dv;
            for (int a = 0; a < dv; a++) {
                double s = 0.0;
                for (int c = 0; c < r; c++) s += wuv[(size_t)a * r + c] * ctx[c];
                o[a] = (real)(s / sum);
            }
        }
    }
}
