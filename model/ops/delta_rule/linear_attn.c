// Plain linear attention with the ELU+1 feature map and the optional normaliser:
// recurrent forward and backward, chunked forward and backward, and the decode step
// (docs/delta-rule.md, "Linear attention with the ELU+1 feature map", "Backward of linear
// attention", "Chunked linear attention" and "Chunked linear-attention backward"). The
// carried state is the pair (S, z).
#include <string.h>

#include "model/ops/delta_rule/internal.h"
#include "base/util.h"

// phi(x) = elu(x) + 1 and its derivative (docs/delta-rule.md, "Linear attention with the
// ELU+1 feature map")
static inline double phi(double x) { return x > 0 ? x + 1.0 : exp(x); }
static inline double dphi(double x) { return x > 0 ? 1.0 : exp(x); }

#define ROW(x, tok, h, D) ((x) + ((size_t)(tok) * (size_t)H + (size_t)(h)) * (size_t)(D))

static void load(double *dst, const real *src, size_t n, size_t task) {
    if (src)
        for (size_t x = 0; x < n; x++) dst[x] = (double)src[task * n + x];
    else
        memset(dst, 0, n * sizeof(double));
}
static void store(real *dst, const double *src, size_t n, size_t task) {
    if (dst)
        for (size_t x = 0; x < n; x++) dst[task * n + x] = (real)src[x];
}

// ---- recurrent ------------------------------------------------------------------------
// One token of the recurrence on the double state (S, z); writes o when o != NULL.
// qh, kh: scratch (K) that receives q^ = s phi(q) and k^ = phi(k).
static void la_token(double *S, double *z, const real *q, const real *k, const real *v, double scale,
                     int normalize, int K, int V, double *qh, double *kh, real *o) {
    for (int i = 0; i < K; i++) {
        qh[i] = scale * phi((double)q[i]);
        kh[i] = phi((double)k[i]);
    }
    for (int i = 0; i < K; i++) {
        for (int j = 0; j < V; j++) S[i * V + j] += kh[i] * (double)v[j];
        if (normalize) z[i] += kh[i];
    }
    if (!o) return;
    double den = 1.0;
    if (normalize) {
        den = LINEAR_ATTN_EPS;
        for (int i = 0; i < K; i++) den += qh[i] * z[i];
    }
    for (int j = 0; j < V; j++) {
        double n = 0;
        for (int i = 0; i < K; i++) n += qh[i] * S[i * V + j];
        o[j] = (real)(n / den);
    }
}

size_t linear_attn_recurrent_fwd_workspace_size(const LinearDims *d) {
    return (size_t)linear_num_seqs(d) * d->H * ((size_t)d->K * d->V + 3 * (size_t)d->K) * sizeof(double);
}

void linear_attn_recurrent_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                   const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                                   void *workspace) {
    lin_check_dims(d, "linear_attn_recurrent_forward");
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = KV + 3 * (size_t)K;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *S = (double *)workspace + (size_t)task * local, *z = S + KV, *qh = z + K, *kh = qh + K;
        load(S, S0, KV, task);
        load(z, normalize ? z0 : NULL, K, task);
        for (int t = 0; t < len; t++) {
            const size_t tok = bos + (size_t)t;
            la_token(S, z, ROW(q, tok, h, K), ROW(k, tok, h, K), ROW(v, tok, h, V), scale, normalize, K, V, qh, kh,
                     ROW(o, tok, h, V));
        }
        store(ST, S, KV, task);
        if (normalize) store(zT, z, K, task);
    }
}

// backward scratch per task: GS (K×V), Gz, qh, kh (K)
size_t linear_attn_recurrent_bwd_workspace_size(const LinearDims *d) {
    const size_t N = (size_t)linear_num_seqs(d), KV = (size_t)d->K * d->V, K = (size_t)d->K;
    const size_t states = (size_t)d->H * ((size_t)d->B * d->T + N) * (KV + K);  // all (S_t, z_t)
    return (N * d->H * (KV + 3 * K) + states) * sizeof(double);
}

void linear_attn_recurrent_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                    const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                    const real *S0, const real *z0, real scale, int normalize,
                                    const LinearDims *d, void *workspace) {
    lin_check_dims(d, "linear_attn_recurrent_backward");
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = KV + 3 * (size_t)K, slot = KV + K;
    double *states_base = (double *)workspace + (size_t)N * H * local;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *GS = (double *)workspace + (size_t)task * local, *Gz = GS + KV, *qh = Gz + K, *kh = qh + K;
        // slot t holds (S_t, z_t), t = 0..len
        double *st = states_base + ((size_t)H * (bos + (size_t)s) + (size_t)h * (len + 1)) * slot;
        load(st, S0, KV, task);
        load(st + KV, normalize ? z0 : NULL, K, task);
        for (int t = 0; t < len; t++) {
            const size_t tok = bos + (size_t)t;
            memcpy(st + (t + 1) * slot, st + t * slot, slot * sizeof(double));
            la_token(st + (t + 1) * slot, st + (t + 1) * slot + KV, ROW(q, tok, h, K), ROW(k, tok, h, K),
                     ROW(v, tok, h, V), scale, normalize, K, V, qh, kh, NULL);
        }
        // docs/delta-rule.md, "Backward of linear attention", reverse time;
        // GS, Gz = dL/dS_t, dL/dz_t
        load(GS, dST, KV, task);
        load(Gz, normalize ? dzT : NULL, K, task);
        for (int t = len - 1; t >= 0; t--) {
            const size_t tok = bos + (size_t)t;
            const real *qt = ROW(q, tok, h, K), *kt = ROW(k, tok, h, K), *vt = ROW(v, tok, h, V);
            const real *dO = ROW(dout, tok, h, V);
            const double *S = st + (t + 1) * slot, *z = S + KV;
            for (int i = 0; i < K; i++) {
                qh[i] = scale * phi((double)qt[i]);
                kh[i] = phi((double)kt[i]);
            }
            // den_t, and dO.o_t = (dO . S^T q^) / den
            double den = 1.0, dOo = 0;
            if (normalize) {
                den = LINEAR_ATTN_EPS;
                for (int i = 0; i < K; i++) den += qh[i] * z[i];
                for (int j = 0; j < V; j++) {
                    double n = 0;
                    for (int i = 0; i < K; i++) n += qh[i] * S[i * V + j];
                    dOo += (double)dO[j] * n / den;
                }
            }
            const double dden = normalize ? -dOo / den : 0.0;  // dden_t = -(dO.o)/den
            // dq^ = S_t dn + z_t dden ; dq = s dq^ ⊙ phi'(q) ; G_S += q^ dn^T ; G_z += q^ dden
            for (int i = 0; i < K; i++) {
                double acc = normalize ? z[i] * dden : 0.0;
                for (int j = 0; j < V; j++) {
                    const double dn = (double)dO[j] / den;
                    acc += S[i * V + j] * dn;
                    GS[i * V + j] += qh[i] * dn;
                }
                dq[((size_t)tok * H + h) * K + i] = (real)(scale * acc * dphi((double)qt[i]));
                Gz[i] += qh[i] * dden;
            }
            // dphi(k) = G_S v + G_z ; dk = dphi(k) ⊙ phi'(k) ; dv = G_S^T phi(k)
            for (int i = 0; i < K; i++) {
                double acc = Gz[i];
                for (int j = 0; j < V; j++) acc += GS[i * V + j] * (double)vt[j];
                dk[((size_t)tok * H + h) * K + i] = (real)(acc * dphi((double)kt[i]));
            }
            for (int j = 0; j < V; j++) {
                double acc = 0;
                for (int i = 0; i < K; i++) acc += GS[i * V + j] * kh[i];
                dv[((size_t)tok * H + h) * V + j] = (real)acc;
            }
        }
        store(dS0, GS, KV, task);
        if (normalize) store(dz0, Gz, K, task);
    }
}

void cpu_linear_attn_step(real *o, real *S, real *z, const real *q, const real *k, const real *v, real scale,
                      int normalize, int N, int H, int K, int V) {
#pragma omp parallel for schedule(static)
    for (int task = 0; task < N * H; task++) {
        real *St = S + (size_t)task * K * V, *zt = normalize ? z + (size_t)task * K : NULL;
        const real *qt = q + (size_t)task * K, *kt = k + (size_t)task * K, *vt = v + (size_t)task * V;
        double den = 1.0;
        if (normalize) {
            den = LINEAR_ATTN_EPS;
            for (int i = 0; i < K; i++) {
                zt[i] = (real)((double)zt[i] + phi((double)kt[i]));
                den += scale * phi((double)qt[i]) * (double)zt[i];
            }
        }
        for (int j = 0; j < V; j++) {
            double n = 0;
            for (int i = 0; i < K; i++) {
                St[i * V + j] = (real)((double)St[i * V + j] + phi((double)kt[i]) * (double)vt[j]);
                n += scale * phi((double)qt[i]) * (double)St[i * V + j];
            }
            o[(size_t)task * V + j] = (real)(n / den);
        }
    }
}

// ---- chunked (docs/delta-rule.md, "Chunked linear attention" and "Chunked
//      linear-attention backward") -------------------------------------------------------
// chunk locals: Qh, Kh, Zr (C×K: q^, k^, z_t), A (C×C: q^_r.k^_c, c <= r), den (C)
static size_t la_chunk_doubles(int C, int K) {
    return 3 * (size_t)C * K + (size_t)C * C + (size_t)C;
}

// Fills Qh, Kh, A for n rows at tok0 and Zr[r] = z_n + sum_{c<=r} k^_c, den_r = q^_r.z_r + eps.
static void la_chunk_prepare(double *mem, int C, const real *q, const real *k, size_t tok0, int h, int H, int K,
                             int n, double scale, int normalize, const double *zn) {
    double *Qh = mem, *Kh = Qh + (size_t)C * K, *Zr = Kh + (size_t)C * K, *A = Zr + (size_t)C * K;
    double *den = A + (size_t)C * C;
    for (int r = 0; r < n; r++) {
        const real *qr = ROW(q, tok0 + r, h, K), *kr = ROW(k, tok0 + r, h, K);
        for (int i = 0; i < K; i++) {
            Qh[r * K + i] = scale * phi((double)qr[i]);
            Kh[r * K + i] = phi((double)kr[i]);
        }
    }
    for (int r = 0; r < n; r++)
        for (int c = 0; c <= r; c++) {
            double acc = 0;
            for (int i = 0; i < K; i++) acc += Qh[r * K + i] * Kh[c * K + i];
            A[r * C + c] = acc;
        }
    for (int r = 0; r < n; r++) {
        den[r] = 1.0;
        if (!normalize) continue;
        den[r] = LINEAR_ATTN_EPS;
        for (int i = 0; i < K; i++) {
            Zr[r * K + i] = (r ? Zr[(r - 1) * K + i] : zn[i]) + Kh[r * K + i];
            den[r] += Qh[r * K + i] * Zr[r * K + i];
        }
    }
}

size_t linear_attn_chunk_fwd_workspace_size(const LinearDims *d, int chunk) {
    if (chunk < 1) die("linear_attn chunk: chunk size must be >= 1 (got %d)", chunk);
    const size_t local = (size_t)d->K * d->V + d->K + la_chunk_doubles(chunk, d->K);
    return (size_t)linear_num_seqs(d) * d->H * local * sizeof(double);
}

// numerator row r: n = q^_r S_n + sum_{c<=r} A[r][c] v_c
static double la_num(const double *Qh, const double *A, const double *S, const real *v, size_t tok0, int h, int H,
                     int C, int K, int V, int r, int j) {
    double acc = 0;
    for (int i = 0; i < K; i++) acc += Qh[r * K + i] * S[i * V + j];
    for (int c = 0; c <= r; c++) acc += A[r * C + c] * (double)ROW(v, tok0 + c, h, V)[j];
    return acc;
}

void linear_attn_chunk_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                               const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                               int C, void *workspace) {
    lin_check_dims(d, "linear_attn_chunk_forward");
    if (C < 1) die("linear_attn_chunk_forward: chunk size must be >= 1 (got %d)", C);
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = KV + K + la_chunk_doubles(C, K);
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        double *S = (double *)workspace + (size_t)task * local, *z = S + KV, *mem = z + K;
        double *Qh = mem, *Kh = Qh + (size_t)C * K, *Zr = Kh + (size_t)C * K, *A = Zr + (size_t)C * K;
        double *den = A + (size_t)C * C;
        load(S, S0, KV, task);
        load(z, normalize ? z0 : NULL, K, task);
        for (int cs = 0; cs < len; cs += C) {
            const int n = len - cs < C ? len - cs : C;
            const size_t tok0 = bos + (size_t)cs;
            la_chunk_prepare(mem, C, q, k, tok0, h, H, K, n, scale, normalize, z);
            // O = (Q^ S_n + (Q^ K^T ⊙ M) V) / den
            for (int r = 0; r < n; r++)
                for (int j = 0; j < V; j++)
                    ROW(o, tok0 + r, h, V)[j] = (real)(la_num(Qh, A, S, v, tok0, h, H, C, K, V, r, j) / den[r]);
            // S_{n+1} = S_n + K^T V ;  z_{n+1} = z_n + sum_r k^_r
            for (int r = 0; r < n; r++) {
                const real *vr = ROW(v, tok0 + r, h, V);
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) S[i * V + j] += Kh[r * K + i] * (double)vr[j];
            }
            if (normalize)
                for (int i = 0; i < K; i++) z[i] = Zr[(n - 1) * K + i];
        }
        store(ST, S, KV, task);
        if (normalize) store(zT, z, K, task);
    }
}

// backward per task: dS (K×V), dz (K), chunk locals, dn (C×V), dden (C), P (C×C),
// dQh, dKh (C×K); plus one (S_n, z_n) slot per chunk.
static size_t la_bwd_local(int C, int K, int V) {
    return (size_t)K * V + K + la_chunk_doubles(C, K) + (size_t)C * V + C + (size_t)C * C + 2 * (size_t)C * K;
}

size_t linear_attn_chunk_bwd_workspace_size(const LinearDims *d, int chunk) {
    if (chunk < 1) die("linear_attn chunk: chunk size must be >= 1 (got %d)", chunk);
    const size_t tasks = (size_t)linear_num_seqs(d) * d->H;
    const size_t slot = (size_t)d->K * d->V + d->K;
    return (tasks * la_bwd_local(chunk, d->K, d->V) + dr_state_slots_total(d, chunk) * slot) * sizeof(double);
}

void linear_attn_chunk_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                                int C, void *workspace) {
    lin_check_dims(d, "linear_attn_chunk_backward");
    if (C < 1) die("linear_attn_chunk_backward: chunk size must be >= 1 (got %d)", C);
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = la_bwd_local(C, K, V), slot = KV + K;
    double *slots = (double *)workspace + (size_t)N * H * local;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        const int nchunks = (len + C - 1) / C;
        double *dS = (double *)workspace + (size_t)task * local, *dz = dS + KV, *mem = dz + K;
        double *Qh = mem, *Kh = Qh + (size_t)C * K, *Zr = Kh + (size_t)C * K, *A = Zr + (size_t)C * K;
        double *den = A + (size_t)C * C;
        double *dn = mem + la_chunk_doubles(C, K), *dden = dn + (size_t)C * V, *P = dden + C;
        double *dQh = P + (size_t)C * C, *dKh = dQh + (size_t)C * K;
        double *hs = slots + dr_state_slot(bos, s, h, H, nchunks, C) * slot;  // (S_n, z_n) at hs + n*slot

        // recompute the chunk states (S_n, z_n)
        if (nchunks > 0) {
            load(hs, S0, KV, task);
            load(hs + KV, normalize ? z0 : NULL, K, task);
        }
        for (int n = 0; n + 1 < nchunks; n++) {
            const int cs = n * C, rows = len - cs < C ? len - cs : C;
            const double *Sn = hs + n * slot;
            double *Snext = hs + (n + 1) * slot;
            la_chunk_prepare(mem, C, q, k, bos + (size_t)cs, h, H, K, rows, scale, normalize, Sn + KV);
            memcpy(Snext, Sn, slot * sizeof(double));
            for (int r = 0; r < rows; r++) {
                const real *vr = ROW(v, bos + (size_t)cs + r, h, V);
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) Snext[i * V + j] += Kh[r * K + i] * (double)vr[j];
            }
            if (normalize)
                for (int i = 0; i < K; i++) Snext[KV + i] = Zr[(rows - 1) * K + i];
        }

        // docs/delta-rule.md, "Chunked linear-attention backward", chunks in reverse;
        // dS, dz = gradients of the state leaving the chunk
        load(dS, dST, KV, task);
        load(dz, normalize ? dzT : NULL, K, task);
        for (int n = nchunks - 1; n >= 0; n--) {
            const int cs = n * C, rows = len - cs < C ? len - cs : C;
            const size_t tok0 = bos + (size_t)cs;
            const double *Sn = hs + n * slot;
            la_chunk_prepare(mem, C, q, k, tok0, h, H, K, rows, scale, normalize, Sn + KV);
            // dn_t = dO_t / den_t ;  dden_t = -(dO_t . o_t) / den_t  (docs/delta-rule.md,
            // "Backward of linear attention")
            for (int r = 0; r < rows; r++) {
                const real *dO = ROW(dout, tok0 + r, h, V);
                double dOo = 0;
                for (int j = 0; j < V; j++) {
                    dn[r * V + j] = (double)dO[j] / den[r];
                    if (normalize) dOo += (double)dO[j] * la_num(Qh, A, Sn, v, tok0, h, H, C, K, V, r, j) / den[r];
                }
                dden[r] = normalize ? -dOo / den[r] : 0.0;
            }
            // P = dn V^T ⊙ M (c <= r)
            for (int r = 0; r < rows; r++)
                for (int c = 0; c <= r; c++) {
                    const real *vc = ROW(v, tok0 + c, h, V);
                    double acc = 0;
                    for (int j = 0; j < V; j++) acc += dn[r * V + j] * (double)vc[j];
                    P[r * C + c] = acc;
                }
            // dQ^ = dn S_n^T + P K^ + z_t dden_t
            for (int r = 0; r < rows; r++)
                for (int i = 0; i < K; i++) {
                    double acc = normalize ? Zr[r * K + i] * dden[r] : 0.0;
                    for (int j = 0; j < V; j++) acc += dn[r * V + j] * Sn[i * V + j];
                    for (int c = 0; c <= r; c++) acc += P[r * C + c] * Kh[c * K + i];
                    dQh[r * K + i] = acc;
                }
            // dK^ = V dS'^T + P^T Q^ + sum_{r>=c} q^_r dden_r + dz' ;  dV = K^ dS' + A^T dn
            for (int c = 0; c < rows; c++) {
                const real *vc = ROW(v, tok0 + c, h, V);
                for (int i = 0; i < K; i++) {
                    double acc = normalize ? dz[i] : 0.0;
                    for (int j = 0; j < V; j++) acc += (double)vc[j] * dS[i * V + j];
                    for (int r = c; r < rows; r++) acc += (P[r * C + c] + dden[r]) * Qh[r * K + i];
                    dKh[c * K + i] = acc;
                }
                real *dvc = ROW(dv, tok0 + c, h, V);
                for (int j = 0; j < V; j++) {
                    double acc = 0;
                    for (int i = 0; i < K; i++) acc += Kh[c * K + i] * dS[i * V + j];
                    for (int r = c; r < rows; r++) acc += A[r * C + c] * dn[r * V + j];
                    dvc[j] = (real)acc;
                }
            }
            // dS_n = dS' + Q^^T dn ;  dz_n = dz' + sum_r q^_r dden_r
            for (int i = 0; i < K; i++) {
                for (int r = 0; r < rows; r++) {
                    const double qh = Qh[r * K + i];
                    for (int j = 0; j < V; j++) dS[i * V + j] += qh * dn[r * V + j];
                    if (normalize) dz[i] += qh * dden[r];
                }
            }
            // through the feature map: dq = s dq^ ⊙ phi'(q), dk = dk^ ⊙ phi'(k)
            for (int r = 0; r < rows; r++) {
                const real *qr = ROW(q, tok0 + r, h, K), *kr = ROW(k, tok0 + r, h, K);
                real *dqr = ROW(dq, tok0 + r, h, K), *dkr = ROW(dk, tok0 + r, h, K);
                for (int i = 0; i < K; i++) {
                    dqr[i] = (real)(scale * dQh[r * K + i] * dphi((double)qr[i]));
                    dkr[i] = (real)(dKh[r * K + i] * dphi((double)kr[i]));
                }
            }
        }
        store(dS0, dS, KV, task);
        if (normalize) store(dz0, dz, K, task);
    }
}
