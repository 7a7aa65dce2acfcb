// Attention with separate strided q/k/v and d_qk != d_v (docs/hybrid.md, "Causal attention
// with a stored logsumexp"), RoPE (docs/hybrid.md, "RoPE on the decoupled slice") and the
// MLA pieces (docs/hybrid.md, "MLA parameters" to "MLA backward, in order", and "Absorbed
// (MQA-style) decode form"), in double:
//  - attention forward vs a naive materialised softmax; backward vs finite differences,
//    with q, k, v as slices of one packed buffer (gradients land in the same slices);
//  - RoPE: finite differences, transpose property, relative-position property;
//  - a whole MLA sublayer (q-LoRA, kv latent norm, shared rope key, RoPE on/off, sigmoid
//    output gate on/off) composed from the ops, checked against finite differences for
//    every weight and the input; the rope-key gradient is the sum over heads;
//  - the absorbed decode form equals the decompressed form (~1e-12 relative).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fd_check.h"
#include "model/backend.h"
#include "testing.h"

#define H_FD 1e-5

static void report(const char *what, double err) {
    printf("  %-44s max rel err %.3e\n", what, err);
    CHECK(err <= FD_TOL, "%s: %.3e", what, err);
}

// =============================== attention ===============================
typedef struct {
    AttnLayout L;
    real *packed;  // q, k, v live inside it
    size_t W;      // packed row width
    size_t qo, ko, vo;
    real *out, *lse, *R;
} AttnCtx;

static double attn_loss(void *p) {
    AttnCtx *c = p;
    cpu_attention_qkv_forward(c->out, c->lse, c->packed + c->qo, c->packed + c->ko, c->packed + c->vo, &c->L);
    return dotv(c->out, c->R, (size_t)c->L.B * c->L.T * c->L.NH * c->L.dv);
}

// naive reference: materialised scores, softmax, weighted sum
static void attn_naive(real *out, real *lse, const real *q, const real *k, const real *v, const AttnLayout *L) {
    int T = L->T;
    for (int b = 0; b < L->B; b++)
        for (int h = 0; h < L->NH; h++) {
            double *S = calloc((size_t)T * T, sizeof(double));
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    if (j > i) { S[i * T + j] = -INFINITY; continue; }
                    double s = 0.0;
                    for (int c = 0; c < L->dqk; c++)
                        s += q[(size_t)(b * T + i) * L->q_row + h * L->q_head + c] *
                             k[(size_t)(b * T + j) * L->k_row + h * L->k_head + c];
                    S[i * T + j] = L->scale * s;
                }
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, z = 0.0;
                for (int j = 0; j < T; j++) m = fmax(m, S[i * T + j]);
                for (int j = 0; j < T; j++) z += exp(S[i * T + j] - m);
                lse[(b * L->NH + h) * T + i] = (real)(m + log(z));
                for (int c = 0; c < L->dv; c++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++)
                        o += exp(S[i * T + j] - m) / z * v[(size_t)(b * T + j) * L->v_row + h * L->v_head + c];
                    out[(size_t)(b * T + i) * L->NH * L->dv + h * L->dv + c] = (real)o;
                }
            }
            free(S);
        }
}

static void test_attention(void) {
    Rng r;
    rng_seed(&r, 11);
    AttnCtx c;
    memset(&c, 0, sizeof c);
    const int B = 2, T = 6, NH = 3, dqk = 5, dv = 3;
    // packed row: [q (NH*dqk) | pad 2 | k (NH*dqk) | v heads with stride dv+1 (NH*(dv+1)) | pad 1]
    c.qo = 0;
    c.ko = NH * dqk + 2;
    c.vo = c.ko + NH * dqk;
    c.W = c.vo + NH * (dv + 1) + 1;
    c.L = (AttnLayout){B, T, NH, dqk, dv, (int)c.W, dqk, (int)c.W, dqk, (int)c.W, dv + 1, 1.0 / sqrt(dqk)};
    size_t N = (size_t)B * T, np = N * c.W, no = N * NH * dv;
    c.packed = rand_vec(&r, np, 1.0);
    c.out = zeros(no);
    c.lse = zeros((size_t)B * NH * T);
    c.R = rand_vec(&r, no, 1.0);
    // forward vs naive
    real *out2 = zeros(no), *lse2 = zeros((size_t)B * NH * T);
    attn_loss(&c);
    attn_naive(out2, lse2, c.packed + c.qo, c.packed + c.ko, c.packed + c.vo, &c.L);
    double eo = max_abs_diff(c.out, out2, no) / max_abs(out2, no);
    double el = max_abs_diff(c.lse, lse2, (size_t)B * NH * T) / max_abs(lse2, (size_t)B * NH * T);
    printf("  attention forward vs naive: out %.3e, lse %.3e\n", eo, el);
    CHECK(eo < 1e-13 && el < 1e-13, "attention forward vs naive: %g %g", eo, el);
    // backward into a packed gradient buffer pre-filled with a sentinel
    real *dpacked = zeros(np);
    for (size_t i = 0; i < np; i++) dpacked[i] = 7;
    cpu_attention_qkv_backward(dpacked + c.qo, dpacked + c.ko, dpacked + c.vo, c.R, c.packed + c.qo, c.packed + c.ko,
                      c.packed + c.vo, c.out, c.lse, &c.L);
    // columns not addressed by q/k/v (the pads and the gaps between v heads) stay untouched
    int touched = 0;
    for (size_t n = 0; n < N; n++) {
        for (int j = 0; j < 2; j++) touched += dpacked[n * c.W + NH * dqk + j] != 7;
        for (int h = 0; h < NH; h++) touched += dpacked[n * c.W + c.vo + h * (dv + 1) + dv] != 7;
        touched += dpacked[n * c.W + c.W - 1] != 7;
    }
    CHECK(touched == 0, "attention backward wrote %d elements outside q/k/v", touched);
    // FD over the whole packed buffer: only q/k/v elements matter, the others have fd = 0,
    // so compare against a copy with the sentinels set to 0
    for (size_t n = 0; n < N; n++) {
        for (int j = 0; j < 2; j++) dpacked[n * c.W + NH * dqk + j] = 0;
        for (int h = 0; h < NH; h++) dpacked[n * c.W + c.vo + h * (dv + 1) + dv] = 0;
        dpacked[n * c.W + c.W - 1] = 0;
    }
    report("attention dq|dk|dv (dqk=5 != dv=3, strided)", fd_rel_err(attn_loss, &c, c.packed, dpacked, np, H_FD));
    // each of q, k, v separately (so a bad tensor cannot hide behind a larger one)
    const char *nm[3] = {"attention dq", "attention dk", "attention dv"};
    for (int part = 0; part < 3; part++) {
        double maxfd = 0, maxd = 0;
        for (size_t n = 0; n < N; n++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < (part == 2 ? dv : dqk); i++) {
                    size_t at = n * c.W + (part == 0 ? c.qo + h * dqk : part == 1 ? c.ko + h * dqk : c.vo + h * (dv + 1)) + i;
                    real x0 = c.packed[at];
                    c.packed[at] = x0 + H_FD;
                    double lp = attn_loss(&c);
                    c.packed[at] = x0 - H_FD;
                    double lm = attn_loss(&c);
                    c.packed[at] = x0;
                    double fd = (lp - lm) / (2 * H_FD);
                    maxfd = fmax(maxfd, fabs(fd));
                    maxd = fmax(maxd, fabs(fd - dpacked[at]));
                }
        report(nm[part], maxd / maxfd);
    }
    // MQA forward (k and v head stride 0) equals the forward with materialised copies
    AttnLayout Lm = c.L;
    Lm.k_head = 0;
    Lm.v_head = 0;
    real *kc = zeros(N * NH * dqk), *vc = zeros(N * NH * dv);
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < dqk; i++) kc[(n * NH + h) * dqk + i] = c.packed[n * c.W + c.ko + i];
            for (int i = 0; i < dv; i++) vc[(n * NH + h) * dv + i] = c.packed[n * c.W + c.vo + i];
        }
    AttnLayout Lc = {B, T, NH, dqk, dv, (int)c.W, dqk, NH * dqk, dqk, NH * dv, dv, c.L.scale};
    cpu_attention_qkv_forward(out2, lse2, c.packed, c.packed + c.ko, c.packed + c.vo, &Lm);
    cpu_attention_qkv_forward(c.out, c.lse, c.packed, kc, vc, &Lc);
    CHECK(max_abs_diff(out2, c.out, no) == 0.0, "MQA (head stride 0) forward differs from materialised heads");
    free(kc), free(vc), free(out2), free(lse2), free(dpacked);
    free(c.packed), free(c.out), free(c.lse), free(c.R);
}

// =============================== RoPE ===============================
typedef struct { int B, T, NH, d, row, head, pos0; double base; real *x, *y, *R; size_t n; } RopeCtx;
static double rope_loss(void *p) {
    RopeCtx *c = p;
    memcpy(c->y, c->x, c->n * sizeof(real));
    cpu_rope_forward(c->y, c->y, c->B, c->T, c->NH, c->d, c->row, c->head, c->pos0, c->base);  // in place
    return dotv(c->y, c->R, c->n);
}
static void test_rope(void) {
    Rng r;
    rng_seed(&r, 12);
    // rope slice of width 4 at offset 0 of heads with stride 6 inside rows of width 20
    RopeCtx c = {2, 5, 3, 4, 20, 6, 3, 10000.0, NULL, NULL, NULL, 0};
    c.n = (size_t)c.B * c.T * c.row;
    c.x = rand_vec(&r, c.n, 1.0);
    c.y = zeros(c.n);
    c.R = rand_vec(&r, c.n, 1.0);
    // the gradient: elements outside the rotated slices pass straight through
    real *g = zeros(c.n);
    memcpy(g, c.R, c.n * sizeof(real));
    cpu_rope_backward(g, g, c.B, c.T, c.NH, c.d, c.row, c.head, c.pos0, c.base);
    report("rope (in place, strided, pos0 = 3)", fd_rel_err(rope_loss, &c, c.x, g, c.n, H_FD));
    // norms are preserved; <R(m) a, R(n) b> depends only on m - n
    rope_loss(&c);
    double n0 = dotv(c.x, c.x, c.n), n1 = dotv(c.y, c.y, c.n);
    CHECK(fabs(n0 - n1) < 1e-12 * n0, "rope changes the norm: %g vs %g", n0, n1);
    real a[8], b[8], ra[8], rb[8];
    for (int i = 0; i < 8; i++) a[i] = (real)rng_normal(&r), b[i] = (real)rng_normal(&r);
    double dots[2];
    for (int s = 0; s < 2; s++) {
        cpu_rope_forward(ra, a, 1, 1, 1, 8, 8, 0, 5 + 10 * s, 500.0);  // positions 5 / 15
        cpu_rope_forward(rb, b, 1, 1, 1, 8, 8, 0, 2 + 10 * s, 500.0);  // positions 2 / 12
        dots[s] = dotv(ra, rb, 8);
    }
    CHECK(fabs(dots[0] - dots[1]) < 1e-12, "rope dot products depend on absolute positions: %g %g", dots[0], dots[1]);
    free(c.x), free(c.y), free(c.R), free(g);
}

// =============================== MLA sublayer ===============================
typedef struct {
    int B, T, d, NH, dn, dr, dv, r, rq;  // rq = 0: direct q_proj
    int rope, gate;
    double rope_base;
    // parameters
    real *Wq, *Wqa, *gq, *Wqb, *Wkva, *gkv, *Wkvb, *Wg, *Wo;
    real *x, *R;
    // activations
    real *aq, *rq_rstd, *aqn, *q, *kv, *c, *kr, *ckv_rstd, *chat, *e, *k, *o, *lse, *z, *u, *y;
} Mla;

static int mla_dqk(const Mla *m) { return m->dn + m->dr; }

static void mla_alloc(Mla *m, Rng *rng) {
    int N = m->B * m->T, dqk = mla_dqk(m), NH = m->NH;
    if (m->rq) {
        m->Wqa = rand_vec(rng, (size_t)m->rq * m->d, 0.4);
        m->gq = rand_vec(rng, m->rq, 0.3);
        for (int i = 0; i < m->rq; i++) m->gq[i] += 1;
        m->Wqb = rand_vec(rng, (size_t)NH * dqk * m->rq, 0.4);
    } else {
        m->Wq = rand_vec(rng, (size_t)NH * dqk * m->d, 0.4);
    }
    m->Wkva = rand_vec(rng, (size_t)(m->r + m->dr) * m->d, 0.4);
    m->gkv = rand_vec(rng, m->r, 0.3);
    for (int i = 0; i < m->r; i++) m->gkv[i] += 1;
    m->Wkvb = rand_vec(rng, (size_t)NH * (m->dn + m->dv) * m->r, 0.4);
    m->Wg = rand_vec(rng, (size_t)NH * m->dv * m->d, 0.4);
    m->Wo = rand_vec(rng, (size_t)m->d * NH * m->dv, 0.4);
    m->x = rand_vec(rng, (size_t)N * m->d, 1.0);
    m->R = rand_vec(rng, (size_t)N * m->d, 1.0);
    m->aq = zeros((size_t)N * (m->rq ? m->rq : 1));
    m->rq_rstd = zeros(N);
    m->aqn = zeros((size_t)N * (m->rq ? m->rq : 1));
    m->q = zeros((size_t)N * NH * dqk);
    m->kv = zeros((size_t)N * (m->r + m->dr));
    m->c = zeros((size_t)N * m->r);
    m->kr = zeros((size_t)N * m->dr);
    m->ckv_rstd = zeros(N);
    m->chat = zeros((size_t)N * m->r);
    m->e = zeros((size_t)N * NH * (m->dn + m->dv));
    m->k = zeros((size_t)N * NH * dqk);
    m->o = zeros((size_t)N * NH * m->dv);
    m->lse = zeros((size_t)N * NH);
    m->z = zeros((size_t)N * NH * m->dv);
    m->u = zeros((size_t)N * NH * m->dv);
    m->y = zeros((size_t)N * m->d);
}

static AttnLayout mla_layout(const Mla *m) {
    int dqk = mla_dqk(m);
    return (AttnLayout){m->B, m->T, m->NH, dqk, m->dv, m->NH * dqk, dqk, m->NH * dqk, dqk,
                        m->NH * (m->dn + m->dv), m->dn + m->dv, 1.0 / sqrt(dqk)};
}

// forward up to the attention output o (N, NH*dv) (docs/hybrid.md, "MLA forward
// (decompressed form)", steps 1-4)
static void mla_forward_attn(Mla *m) {
    int N = m->B * m->T, dqk = mla_dqk(m), NH = m->NH;
    if (m->rq) {
        cpu_matmul_forward(m->aq, m->x, m->Wqa, NULL, N, m->d, m->rq);
        cpu_rmsnorm_forward(m->aqn, m->rq_rstd, m->aq, m->gq, N, m->rq, 1e-6);
        cpu_matmul_forward(m->q, m->aqn, m->Wqb, NULL, N, m->rq, NH * dqk);
    } else {
        cpu_matmul_forward(m->q, m->x, m->Wq, NULL, N, m->d, NH * dqk);
    }
    cpu_matmul_forward(m->kv, m->x, m->Wkva, NULL, N, m->d, m->r + m->dr);
    cpu_mla_split_kv_forward(m->c, m->kr, m->kv, N, m->r, m->dr);
    if (m->rope) {
        cpu_rope_forward(m->q + m->dn, m->q + m->dn, m->B, m->T, NH, m->dr, NH * dqk, dqk, 0, m->rope_base);
        cpu_rope_forward(m->kr, m->kr, m->B, m->T, 1, m->dr, m->dr, 0, 0, m->rope_base);
    }
    cpu_rmsnorm_forward(m->chat, m->ckv_rstd, m->c, m->gkv, N, m->r, 1e-6);
    cpu_matmul_forward(m->e, m->chat, m->Wkvb, NULL, N, m->r, NH * (m->dn + m->dv));
    cpu_mla_build_k_forward(m->k, m->e, m->kr, N, NH, m->dn, m->dv, m->dr);
    AttnLayout L = mla_layout(m);
    cpu_attention_qkv_forward(m->o, m->lse, m->q, m->k, m->e + m->dn, &L);
}

// gate + o_proj (docs/hybrid.md, "MLA forward (decompressed form)", steps 5-6) applied to
// an attention output
static void mla_forward_out(Mla *m, const real *o) {
    int N = m->B * m->T, NH = m->NH;
    size_t no = (size_t)N * NH * m->dv;
    if (m->gate) {
        cpu_matmul_forward(m->z, m->x, m->Wg, NULL, N, m->d, NH * m->dv);
        cpu_sigmoid_gate_forward(m->u, o, m->z, no);
    } else {
        memcpy(m->u, o, no * sizeof(real));
    }
    cpu_matmul_forward(m->y, m->u, m->Wo, NULL, N, NH * m->dv, m->d);
}

static double mla_loss(void *p) {
    Mla *m = p;
    mla_forward_attn(m);
    mla_forward_out(m, m->o);
    return dotv(m->y, m->R, (size_t)m->B * m->T * m->d);
}

typedef struct { real *Wq, *Wqa, *gq, *Wqb, *Wkva, *gkv, *Wkvb, *Wg, *Wo, *x; } MlaGrads;

// backward of the whole sublayer (docs/hybrid.md, "MLA backward, in order"), dy = R
static void mla_backward(Mla *m, MlaGrads *g, real **dkr_out, real **dk_out) {
    int N = m->B * m->T, dqk = mla_dqk(m), NH = m->NH, d = m->d;
    size_t no = (size_t)N * NH * m->dv;
    real *du = zeros(no), *d_o = zeros(no), *dz = zeros(no), *dxt = zeros((size_t)N * d);
    cpu_matmul_backward(du, g->Wo, NULL, m->R, m->u, m->Wo, N, NH * m->dv, d);  // 1
    for (size_t i = 0; i < (size_t)N * d; i++) g->x[i] = 0;
    if (m->gate) {  // 2
        cpu_sigmoid_gate_backward(d_o, dz, du, m->o, m->z, no);
        cpu_matmul_backward(dxt, g->Wg, NULL, dz, m->x, m->Wg, N, d, NH * m->dv);
        for (size_t i = 0; i < (size_t)N * d; i++) g->x[i] += dxt[i];
    } else {
        memcpy(d_o, du, no * sizeof(real));
    }
    // 3: attention backward; dv lands in the v columns of de
    real *dq = zeros((size_t)N * NH * dqk), *dk = zeros((size_t)N * NH * dqk);
    real *de = zeros((size_t)N * NH * (m->dn + m->dv)), *dkr = zeros((size_t)N * m->dr);
    AttnLayout L = mla_layout(m);
    cpu_attention_qkv_backward(dq, dk, de + m->dn, d_o, m->q, m->k, m->e + m->dn, m->o, m->lse, &L);
    cpu_mla_build_k_backward(de, dkr, dk, N, NH, m->dn, m->dv, m->dr);  // 4
    if (m->rope) {
        cpu_rope_backward(dq + m->dn, dq + m->dn, m->B, m->T, NH, m->dr, NH * dqk, dqk, 0, m->rope_base);
        cpu_rope_backward(dkr, dkr, m->B, m->T, 1, m->dr, m->dr, 0, 0, m->rope_base);
    }
    real *dchat = zeros((size_t)N * m->r), *dc = zeros((size_t)N * m->r), *dkv = zeros((size_t)N * (m->r + m->dr));
    cpu_matmul_backward(dchat, g->Wkvb, NULL, de, m->chat, m->Wkvb, N, m->r, NH * (m->dn + m->dv));  // 5
    cpu_rmsnorm_backward(dc, g->gkv, dchat, m->c, m->gkv, m->ckv_rstd, N, m->r);                      // 6
    cpu_mla_split_kv_backward(dkv, dc, dkr, N, m->r, m->dr);                                          // 7
    cpu_matmul_backward(dxt, g->Wkva, NULL, dkv, m->x, m->Wkva, N, d, m->r + m->dr);
    for (size_t i = 0; i < (size_t)N * d; i++) g->x[i] += dxt[i];
    if (m->rq) {  // 8
        real *daqn = zeros((size_t)N * m->rq), *daq = zeros((size_t)N * m->rq);
        cpu_matmul_backward(daqn, g->Wqb, NULL, dq, m->aqn, m->Wqb, N, m->rq, NH * dqk);
        cpu_rmsnorm_backward(daq, g->gq, daqn, m->aq, m->gq, m->rq_rstd, N, m->rq);
        cpu_matmul_backward(dxt, g->Wqa, NULL, daq, m->x, m->Wqa, N, d, m->rq);
        free(daqn), free(daq);
    } else {
        cpu_matmul_backward(dxt, g->Wq, NULL, dq, m->x, m->Wq, N, d, NH * dqk);
    }
    for (size_t i = 0; i < (size_t)N * d; i++) g->x[i] += dxt[i];
    if (dkr_out) *dkr_out = dkr; else free(dkr);
    if (dk_out) *dk_out = dk; else free(dk);
    free(du), free(d_o), free(dz), free(dxt), free(dq), free(de), free(dchat), free(dc), free(dkv);
}

static void mla_free(Mla *m) {
    real *ps[] = {m->Wq, m->Wqa, m->gq, m->Wqb, m->Wkva, m->gkv, m->Wkvb, m->Wg, m->Wo, m->x, m->R,
                  m->aq, m->rq_rstd, m->aqn, m->q, m->kv, m->c, m->kr, m->ckv_rstd, m->chat, m->e, m->k,
                  m->o, m->lse, m->z, m->u, m->y};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

static Mla mla_config(int rq, int rope, int gate) {
    Mla m;
    memset(&m, 0, sizeof m);
    m.B = 2, m.T = 4, m.d = 6, m.NH = 2, m.dn = 3, m.dr = 2, m.dv = 4, m.r = 5, m.rq = rq;
    m.rope = rope, m.gate = gate, m.rope_base = 100.0;
    return m;
}

static void test_mla_grad(int rq, int rope, int gate) {
    Rng rng;
    rng_seed(&rng, 13 + rq + 2 * rope + 4 * gate);
    Mla m = mla_config(rq, rope, gate);
    mla_alloc(&m, &rng);
    int N = m.B * m.T, dqk = mla_dqk(&m), NH = m.NH, d = m.d;
    struct { real **p, **g; size_t n; const char *name; } t[] = {
        {&m.Wq, NULL, rq ? 0 : (size_t)NH * dqk * d, "W_q"},
        {&m.Wqa, NULL, rq ? (size_t)rq * d : 0, "W_qa"},
        {&m.gq, NULL, rq ? (size_t)rq : 0, "gamma_q"},
        {&m.Wqb, NULL, rq ? (size_t)NH * dqk * rq : 0, "W_qb"},
        {&m.Wkva, NULL, (size_t)(m.r + m.dr) * d, "W_kva"},
        {&m.gkv, NULL, (size_t)m.r, "gamma_kv"},
        {&m.Wkvb, NULL, (size_t)NH * (m.dn + m.dv) * m.r, "W_kvb"},
        {&m.Wg, NULL, gate ? (size_t)NH * m.dv * d : 0, "W_g"},
        {&m.Wo, NULL, (size_t)d * NH * m.dv, "W_o"},
        {&m.x, NULL, (size_t)N * d, "x"},
    };
    MlaGrads g;
    real **gs[] = {&g.Wq, &g.Wqa, &g.gq, &g.Wqb, &g.Wkva, &g.gkv, &g.Wkvb, &g.Wg, &g.Wo, &g.x};
    for (int i = 0; i < 10; i++) *gs[i] = zeros(t[i].n), t[i].g = gs[i];
    mla_loss(&m);
    real *dkr, *dk;
    mla_backward(&m, &g, &dkr, &dk);
    // docs/hybrid.md, "Verification identities": the shared rope key's gradient is the sum
    // over heads of the per-head key gradients
    // (before the RoPE backward when rope is on, so check only the NoPE case directly)
    if (!rope) {
        double worst = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < m.dr; i++) {
                double s = 0;
                for (int h = 0; h < NH; h++) s += dk[((size_t)n * NH + h) * dqk + m.dn + i];
                worst = fmax(worst, fabs(s - dkr[(size_t)n * m.dr + i]));
            }
        CHECK(worst < 1e-14, "dk_rope is not the head sum (%g)", worst);
    }
    char what[128];
    for (int i = 0; i < 10; i++) {
        if (!t[i].n) continue;
        snprintf(what, sizeof what, "MLA %s%s%s d%s", rq ? "qlora " : "", rope ? "rope " : "nope ",
                 gate ? "gated" : "ungated", t[i].name);
        report(what, fd_rel_err(mla_loss, &m, *t[i].p, *t[i].g, t[i].n, H_FD));
    }
    for (int i = 0; i < 10; i++) free(*gs[i]);
    free(dkr), free(dk);
    mla_free(&m);
}

// absorbed decode (docs/hybrid.md, "Absorbed (MQA-style) decode form") == decompressed
// attention, with and without gate / q-LoRA / RoPE
static void test_mla_absorbed(int rq, int rope, int gate) {
    Rng rng;
    rng_seed(&rng, 99 + rq + 2 * rope + 4 * gate);
    Mla m = mla_config(rq, rope, gate);
    m.B = 1, m.T = 7, m.NH = 3, m.r = 6;
    mla_alloc(&m, &rng);
    int N = m.T, NH = m.NH, dqk = mla_dqk(&m), dc = m.r + m.dr;
    size_t no = (size_t)N * NH * m.dv, ny = (size_t)N * m.d;
    mla_loss(&m);  // decompressed forward: o, y
    real *y_dec = zeros(ny), *o_dec = zeros(no);
    memcpy(y_dec, m.y, ny * sizeof(real));
    memcpy(o_dec, m.o, no * sizeof(real));
    // latent cache: [chat | k_rope (rotated)] per token
    real *cache = zeros((size_t)N * dc);
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < m.r; i++) cache[(size_t)t * dc + i] = m.chat[(size_t)t * m.r + i];
        for (int i = 0; i < m.dr; i++) cache[(size_t)t * dc + m.r + i] = m.kr[(size_t)t * m.dr + i];
    }
    // all rows at once (prefill-shaped), then the last row alone (one decode step), then
    // row 3 with a cache that holds only tokens 0..3
    real *o_abs = zeros(no);
    cpu_mla_absorbed_attention(o_abs, m.q, cache, m.Wkvb, N, N, NH, m.dn, m.dr, m.dv, m.r, 1.0 / sqrt(dqk));
    double e_all = max_abs_diff(o_abs, o_dec, no) / max_abs(o_dec, no);
    real *o1 = zeros((size_t)NH * m.dv);
    cpu_mla_absorbed_attention(o1, m.q + (size_t)(N - 1) * NH * dqk, cache, m.Wkvb, 1, N, NH, m.dn, m.dr, m.dv,
                               m.r, 1.0 / sqrt(dqk));
    double e_last = max_abs_diff(o1, o_dec + (size_t)(N - 1) * NH * m.dv, (size_t)NH * m.dv) / max_abs(o_dec, no);
    cpu_mla_absorbed_attention(o1, m.q + (size_t)3 * NH * dqk, cache, m.Wkvb, 1, 4, NH, m.dn, m.dr, m.dv, m.r,
                               1.0 / sqrt(dqk));
    double e_mid = max_abs_diff(o1, o_dec + (size_t)3 * NH * m.dv, (size_t)NH * m.dv) / max_abs(o_dec, no);
    mla_forward_out(&m, o_abs);  // gate + o_proj on the absorbed output
    double e_y = max_abs_diff(m.y, y_dec, ny) / max_abs(y_dec, ny);
    printf("  MLA absorbed == decompressed (%s%s%s): o %.2e, last row %.2e, row 3 %.2e, y %.2e\n",
           rq ? "qlora " : "", rope ? "rope " : "nope ", gate ? "gated" : "ungated", e_all, e_last, e_mid, e_y);
    CHECK(e_all < 1e-12 && e_last < 1e-12 && e_mid < 1e-12 && e_y < 1e-12, "absorbed != decompressed: %g %g %g %g",
          e_all, e_last, e_mid, e_y);
    free(y_dec), free(o_dec), free(cache), free(o_abs), free(o1);
    mla_free(&m);
}

// attention forward + backward bit-identical with 1 and 2 threads
static void test_attention_threads(void) {
    Rng r;
    rng_seed(&r, 14);
    const int B = 2, T = 33, NH = 3, dqk = 12, dv = 8, N = B * T;
    AttnLayout L = {B, T, NH, dqk, dv, NH * dqk, dqk, NH * dqk, dqk, NH * dv, dv, 1.0 / sqrt(dqk)};
    real *q = rand_vec(&r, (size_t)N * NH * dqk, 1), *k = rand_vec(&r, (size_t)N * NH * dqk, 1);
    real *v = rand_vec(&r, (size_t)N * NH * dv, 1), *R = rand_vec(&r, (size_t)N * NH * dv, 1);
    real *res[2][5];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        real *o = zeros((size_t)N * NH * dv), *lse = zeros((size_t)N * NH);
        real *dq = zeros((size_t)N * NH * dqk), *dk = zeros((size_t)N * NH * dqk), *dvv = zeros((size_t)N * NH * dv);
        cpu_attention_qkv_forward(o, lse, q, k, v, &L);
        cpu_attention_qkv_backward(dq, dk, dvv, R, q, k, v, o, lse, &L);
        res[t][0] = o, res[t][1] = lse, res[t][2] = dq, res[t][3] = dk, res[t][4] = dvv;
    }
    omp_set_num_threads(1);
    size_t sz[5] = {(size_t)N * NH * dv, (size_t)N * NH, (size_t)N * NH * dqk, (size_t)N * NH * dqk, (size_t)N * NH * dv};
    int same = 1;
    for (int i = 0; i < 5; i++) same &= !memcmp(res[0][i], res[1][i], sz[i] * sizeof(real));
    CHECK(same, "attention results differ between 1 and 2 threads");
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 5; i++) free(res[t][i]);
    free(q), free(k), free(v), free(R);
}

int main(void) {
    omp_set_num_threads(1);  // FD loops: many tiny ops (threads are checked separately)
    test_attention_threads();
    test_attention();
    test_rope();
    for (int v = 0; v < 8; v++) test_mla_grad(v & 1 ? 4 : 0, (v >> 1) & 1, (v >> 2) & 1);
    for (int v = 0; v < 8; v++) test_mla_absorbed(v & 1 ? 4 : 0, (v >> 1) & 1, (v >> 2) & 1);
    TEST_MAIN_END();
}
