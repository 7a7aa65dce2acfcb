// Token + position embedding (docs/hybrid.md, "Token embedding and tied output head", the
// input side).
//   out[b,t,:] = wte[tok[b,t],:] + (wpe ? wpe[t,:] : 0)
// Backward: dwte[tok[b,t],:] += dout[b,t,:] (a scatter-add: repeated tokens sum up),
//           dwpe[t,:]        += sum_b dout[b,t,:].
// The scatter is made deterministic by giving each thread whole channel blocks and
// walking the tokens serially inside: every gradient element is summed by one thread,
// always in token order.
#include "model/ops/core/core.h"

#define EMBED_CBLOCK 16  // channels per parallel work item in the backward

void cpu_embed_forward(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        real *o = out + (size_t)bt * C;
        const real *we = wte + (size_t)tokens[bt] * C;
        if (wpe) {
            const real *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = we[c];
        }
    }
}

void cpu_embed_backward(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += EMBED_CBLOCK) {
        int c1 = c0 + EMBED_CBLOCK < C ? c0 + EMBED_CBLOCK : C;
        for (int bt = 0; bt < B * T; bt++) {  // serial over tokens: fixed summation order
            int t = bt % T;
            const real *d = dout + (size_t)bt * C;
            real *gw = dwte + (size_t)tokens[bt] * C;
            for (int c = c0; c < c1; c++) gw[c] += d[c];
            if (dwpe) {
                real *gp = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) gp[c] += d[c];
            }
        }
    }
}
