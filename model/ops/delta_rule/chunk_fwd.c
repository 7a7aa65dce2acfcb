// Chunkwise-parallel forward of KDA / GDN / DeltaNet (docs/delta-rule.md, "Exactness of the
// chunk form: the WY representation" and "The chunkwise forward algorithm").
#include <string.h>

#include "model/ops/delta_rule/internal.h"
#include "base/util.h"

// per (sequence, head) task: the running state H (K×V) and one chunk's locals
static size_t fwd_local(int C, int K, int V) { return (size_t)K * V + dr_chunk_doubles(C, K, V); }

size_t delta_chunk_fwd_workspace_size(const LinearDims *d, int chunk) {
    if (chunk < 1) die("delta-rule chunk forward: chunk size must be >= 1 (got %d)", chunk);
    return (size_t)linear_num_seqs(d) * d->H * fwd_local(chunk, d->K, d->V) * sizeof(double);
}

void dr_chunk_forward(real *o, real *hT, const DeltaIn *in, const real *h0, const LinearDims *d, int C,
                      void *workspace) {
    lin_check_dims(d, "chunk forward");
    if (C < 1) die("chunk forward: chunk size must be >= 1 (got %d)", C);
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = fwd_local(C, K, V);
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *S = (double *)workspace + (size_t)task * local;
        DrChunk cl;
        dr_chunk_bind(&cl, S + KV, C, K, V);
        if (h0)
            for (size_t x = 0; x < KV; x++) S[x] = (double)h0[(size_t)task * KV + x];
        else
            memset(S, 0, KV * sizeof(double));
        for (int cs = 0; cs < len; cs += C) {
            const int n = len - cs < C ? len - cs : C;
            const size_t tok0 = bos + (size_t)cs;
            dr_chunk_prepare(&cl, in, tok0, h, n);
            dr_chunk_delta(&cl, n, S);  // Delta = U - W H_n
            // O = s Q_g H_n + Aqk Delta   (docs/delta-rule.md, "Exactness of the chunk form:
            // the WY representation")
            for (int r = 0; r < n; r++) {
                real *orow = o + ((tok0 + r) * H + h) * (size_t)V;
                for (int j = 0; j < V; j++) {
                    double acc = 0;
                    for (int i = 0; i < K; i++) acc += cl.Qg[r * K + i] * S[i * V + j];
                    acc *= in->scale;
                    for (int c = 0; c <= r; c++) acc += cl.Aqk[r * C + c] * cl.D[c * V + j];
                    orow[j] = (real)acc;
                }
            }
            // H_{n+1} = diag(e_end) H_n + K_e^T Delta
            dr_chunk_advance_state(&cl, n, S);
        }
        if (hT)
            for (size_t x = 0; x < KV; x++) hT[(size_t)task * KV + x] = (real)S[x];
    }
}

void kda_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                       const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                       void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_CHANNEL, d->H, d->K, d->V, scale);
    dr_chunk_forward(o, hT, &in, h0, d, chunk, workspace);
}
void gdn_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                       const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                       void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_HEAD, d->H, d->K, d->V, scale);
    dr_chunk_forward(o, hT, &in, h0, d, chunk, workspace);
}
void deltanet_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *beta,
                            const real *h0, real scale, const LinearDims *d, int chunk, void *workspace) {
    DeltaIn in = delta_in(q, k, v, NULL, beta, DR_GATE_NONE, d->H, d->K, d->V, scale);
    dr_chunk_forward(o, hT, &in, h0, d, chunk, workspace);
}
