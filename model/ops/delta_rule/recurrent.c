// Recurrent (token-by-token) KDA / GDN / DeltaNet: the reference forward
// (docs/delta-rule.md, "Kimi Delta Attention (KDA)"), its backward (docs/delta-rule.md,
// "Backward of the delta-rule recurrence") and the single-token decode step. GDN and
// DeltaNet are KDA with a broadcast or zero gate (docs/delta-rule.md, "How the four rules
// relate"); they share this code through DeltaIn.gate.
#include <string.h>

#include "model/ops/delta_rule/internal.h"

// ---- one token of the recurrence on a double state S (K×V), index form --------------
//   S~[i][j] = exp(g[i]) S[i][j];  p[j] = sum_i k[i] S~[i][j];  d[j] = beta (v[j] - p[j])
//   S[i][j]  = S~[i][j] + k[i] d[j];  o[j] = scale * sum_i q[i] S[i][j]
// delta: scratch (V). o may be NULL.
static void dr_token_update(double *S, const DeltaIn *in, size_t tok, int h, double *delta, real *o) {
    const int K = in->K, V = in->V;
    const real *q = dr_qk_row(in->q, in, tok, h), *k = dr_qk_row(in->k, in, tok, h);
    const real *v = dr_v_row(in->v, in, tok, h);
    const double b = (double)in->beta[tok * (size_t)in->H + (size_t)h];
    if (in->gate != DR_GATE_NONE)
        for (int i = 0; i < K; i++) {
            double e = exp(dr_gate(in, tok, h, i));
            for (int j = 0; j < V; j++) S[i * V + j] *= e;
        }
    for (int j = 0; j < V; j++) delta[j] = 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) delta[j] += (double)k[i] * S[i * V + j];
    for (int j = 0; j < V; j++) delta[j] = b * ((double)v[j] - delta[j]);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) S[i * V + j] += (double)k[i] * delta[j];
    if (!o) return;
    for (int j = 0; j < V; j++) {
        double acc = 0;
        for (int i = 0; i < K; i++) acc += (double)q[i] * S[i * V + j];
        o[j] = (real)(in->scale * acc);
    }
}

static void load_state(double *S, const real *h0, int task, int K, int V) {
    size_t n = (size_t)K * V;
    if (h0)
        for (size_t x = 0; x < n; x++) S[x] = (double)h0[(size_t)task * n + x];
    else
        memset(S, 0, n * sizeof(double));
}

size_t delta_recurrent_fwd_workspace_size(const LinearDims *d) {
    return (size_t)linear_num_seqs(d) * d->H * ((size_t)d->K * d->V + d->V) * sizeof(double);
}

void dr_recurrent_forward(real *o, real *hT, const DeltaIn *in, const real *h0, const LinearDims *d,
                          void *workspace) {
    lin_check_dims(d, "recurrent forward");
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t per_task = (size_t)K * V + V;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *S = (double *)workspace + (size_t)task * per_task, *delta = S + (size_t)K * V;
        load_state(S, h0, task, K, V);
        for (int t = 0; t < len; t++) {
            size_t tok = bos + (size_t)t;
            dr_token_update(S, in, tok, h, delta, o + (tok * H + h) * (size_t)V);
        }
        if (hT)
            for (size_t x = 0; x < (size_t)K * V; x++) hT[(size_t)task * K * V + x] = (real)S[x];
    }
}

// per-task scratch of the backward: G (K×V), delta, r, dd (V each), e, dgc (K each)
static size_t rec_bwd_local(int K, int V) { return (size_t)K * V + 3 * (size_t)V + 2 * (size_t)K; }

size_t delta_recurrent_bwd_workspace_size(const LinearDims *d) {
    const size_t N = (size_t)linear_num_seqs(d), KV = (size_t)d->K * d->V;
    // all T+1 states (docs/delta-rule.md, "Memory of the recurrent reference")
    size_t states = (size_t)d->H * ((size_t)d->B * d->T + N) * KV;
    return (N * d->H * rec_bwd_local(d->K, d->V) + states) * sizeof(double);
}

void dr_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                           const real *dhT, const DeltaIn *in, const real *h0, const LinearDims *d,
                           void *workspace) {
    lin_check_dims(d, "recurrent backward");
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = rec_bwd_local(K, V);
    double *states_base = (double *)workspace + (size_t)N * H * local;
    const double scale = in->scale;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *G = (double *)workspace + (size_t)task * local;
        double *delta = G + KV, *r = delta + V, *dd = r + V, *e = dd + V, *dgc = e + K;
        // states[t] = S_t for t = 0..len (sequence s owns H*(len+1) slots from H*(bos+s))
        double *states = states_base + ((size_t)H * (bos + (size_t)s) + (size_t)h * (len + 1)) * KV;
        load_state(states, h0, task, K, V);
        for (int t = 0; t < len; t++) {
            memcpy(states + (size_t)(t + 1) * KV, states + (size_t)t * KV, KV * sizeof(double));
            dr_token_update(states + (size_t)(t + 1) * KV, in, bos + (size_t)t, h, delta, NULL);
        }
        // backward (docs/delta-rule.md, "Backward of the delta-rule recurrence"), reverse
        // time; G = running dL/dS_t, starts at dS_T
        load_state(G, dhT, task, K, V);
        for (int t = len - 1; t >= 0; t--) {
            const size_t tok = bos + (size_t)t, row = tok * H + h;
            const real *q = dr_qk_row(in->q, in, tok, h), *k = dr_qk_row(in->k, in, tok, h);
            const real *v = dr_v_row(in->v, in, tok, h), *dO = dout + row * V;
            const double b = (double)in->beta[row];
            const double *St = states + (size_t)(t + 1) * KV, *Sp = states + (size_t)t * KV;
            // (1) G += s q dO^T ; (2) dq = s S_t dO
            for (int i = 0; i < K; i++) {
                double acc = 0;
                for (int j = 0; j < V; j++) {
                    G[i * V + j] += scale * (double)q[i] * (double)dO[j];
                    acc += St[i * V + j] * (double)dO[j];
                }
                dq[row * K + i] = (real)(scale * acc);
            }
            // (3) recompute S~ = diag(exp g) S_{t-1} (row i is e[i]*Sp[i][:]), r, delta
            for (int i = 0; i < K; i++) e[i] = exp(dr_gate(in, tok, h, i));
            for (int j = 0; j < V; j++) r[j] = 0;
            for (int i = 0; i < K; i++)
                for (int j = 0; j < V; j++) r[j] += (double)k[i] * e[i] * Sp[i * V + j];
            for (int j = 0; j < V; j++) {
                r[j] = (double)v[j] - r[j];
                delta[j] = b * r[j];
            }
            // (4) dd = G^T k ; (5) dv = beta dd ; (6) dbeta = dd . r
            for (int j = 0; j < V; j++) dd[j] = 0;
            for (int i = 0; i < K; i++)
                for (int j = 0; j < V; j++) dd[j] += (double)k[i] * G[i * V + j];
            double db = 0;
            for (int j = 0; j < V; j++) {
                dv[row * V + j] = (real)(b * dd[j]);
                db += dd[j] * r[j];
            }
            dbeta[row] = (real)db;
            // (7) dk = G delta - beta S~ dd ; (8) dS~ = G - beta k dd^T ;
            // (9) dg[i] = sum_j S~[i][j] dS~[i][j] ; (10) G = diag(exp g) dS~
            for (int i = 0; i < K; i++) {
                double a1 = 0, a2 = 0, a3 = 0;
                for (int j = 0; j < V; j++) {
                    const double Stl = e[i] * Sp[i * V + j];
                    const double dSt = G[i * V + j] - b * (double)k[i] * dd[j];
                    a1 += G[i * V + j] * delta[j];
                    a2 += Stl * dd[j];
                    a3 += Stl * dSt;
                    G[i * V + j] = e[i] * dSt;
                }
                dk[row * K + i] = (real)(a1 - b * a2);
                dgc[i] = a3;
            }
            dr_store_dg(dg, in, tok, h, dgc);
        }
        if (dh0)
            for (size_t x = 0; x < KV; x++) dh0[(size_t)task * KV + x] = (real)G[x];
    }
}

// ---- decode: one token for N sequences, state (N,H,K,V) in place ---------------------
// (docs/delta-rule.md, "Kimi Delta Attention (KDA)" and "Decode steps")
void dr_step(real *o, real *state, const DeltaIn *in, int N) {
    const int H = in->H, K = in->K, V = in->V;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < N * H; task++) {
        const int h = task % H;
        const size_t tok = (size_t)(task / H);
        real *S = state + (size_t)task * K * V;
        const real *q = dr_qk_row(in->q, in, tok, h), *k = dr_qk_row(in->k, in, tok, h);
        const real *v = dr_v_row(in->v, in, tok, h);
        const double b = (double)in->beta[task];
        // S~ = diag(exp g) S
        if (in->gate != DR_GATE_NONE)
            for (int i = 0; i < K; i++) {
                double e = exp(dr_gate(in, tok, h, i));
                for (int j = 0; j < V; j++) S[i * V + j] = (real)(e * (double)S[i * V + j]);
            }
        // column by column: p = S~^T k, delta = beta (v - p), S = S~ + k delta^T, o = s S^T q
        for (int j = 0; j < V; j++) {
            double p = 0;
            for (int i = 0; i < K; i++) p += (double)k[i] * (double)S[i * V + j];
            const double dj = b * ((double)v[j] - p);
            double acc = 0;
            for (int i = 0; i < K; i++) {
                S[i * V + j] = (real)((double)S[i * V + j] + (double)k[i] * dj);
                acc += (double)q[i] * (double)S[i * V + j];
            }
            o[(size_t)task * V + j] = (real)(in->scale * acc);
        }
    }
}

// ---- public entry points ------------------------------------------------------------
void kda_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                           const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_CHANNEL, d->H, d->K, d->V, scale);
    dr_recurrent_forward(o, hT, &in, h0, d, workspace);
}
void kda_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                            const real *dhT, const real *q, const real *k, const real *v, const real *g,
                            const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_CHANNEL, d->H, d->K, d->V, scale);
    dr_recurrent_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, &in, h0, d, workspace);
}
void gdn_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                           const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_HEAD, d->H, d->K, d->V, scale);
    dr_recurrent_forward(o, hT, &in, h0, d, workspace);
}
void gdn_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                            const real *dhT, const real *q, const real *k, const real *v, const real *g,
                            const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_HEAD, d->H, d->K, d->V, scale);
    dr_recurrent_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, &in, h0, d, workspace);
}
void deltanet_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *beta,
                                const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, NULL, beta, DR_GATE_NONE, d->H, d->K, d->V, scale);
    dr_recurrent_forward(o, hT, &in, h0, d, workspace);
}
void deltanet_recurrent_backward(real *dq, real *dk, real *dv, real *dbeta, real *dh0, const real *dout,
                                 const real *dhT, const real *q, const real *k, const real *v, const real *beta,
                                 const real *h0, real scale, const LinearDims *d, void *workspace) {
    DeltaIn in = delta_in(q, k, v, NULL, beta, DR_GATE_NONE, d->H, d->K, d->V, scale);
    dr_recurrent_backward(dq, dk, dv, NULL, dbeta, dh0, dout, dhT, &in, h0, d, workspace);
}

void kda_step(real *o, real *state, const real *q, const real *k, const real *v, const real *g, const real *beta,
              real scale, int N, int H, int K, int V) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_CHANNEL, H, K, V, scale);
    dr_step(o, state, &in, N);
}
void gdn_step(real *o, real *state, const real *q, const real *k, const real *v, const real *g, const real *beta,
              real scale, int N, int H, int K, int V) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_HEAD, H, K, V, scale);
    dr_step(o, state, &in, N);
}
void deltanet_step(real *o, real *state, const real *q, const real *k, const real *v, const real *beta, real scale,
                   int N, int H, int K, int V) {
    DeltaIn in = delta_in(q, k, v, NULL, beta, DR_GATE_NONE, H, K, V, scale);
    dr_step(o, state, &in, N);
}
