// GPU parity tests of the MLA family (model/ops/mla/mla.h; kernels/mla/) against the float CPU
// reference (model/ops/mla/*.c, double inside) on fresh random bf16-rounded inputs.
// Method and helpers: tests/gpu/harness.h (NaN-poisoned outputs, RMS relative error).
// Tolerances: bf16 outputs TOL_OUT 5e-3; dq, dk, dv, de, dkr, do, dz TOL_GRAD 8e-3; lse (fp32)
// TOL_F32 1e-4 (the scores are fp32 sums of exact bf16 products and the row sum is fp32; P is
// rounded to bf16 only for the P V product, which lse does not see).
//  - attention_qkv forward/backward at (dqk, dv) = (192, 128) (MLA), (64, 64), (48, 32)
//    (zero-padded into the 64-wide tensor-core tiles) and (5, 3) (SIMT only), T = 1, 63, 64, 65,
//    200, with q, k, v contiguous, as the MLA mixer's slices (q, k (N, NH*dqk); v the v
//    columns of e (N, NH*(dn+dv))) and as slices of one packed row (gradients into one packed
//    buffer: the elements outside q, k, v must stay as poisoned); k with head stride 0 (MQA,
//    forward only); every case on the tensor-core and the SIMT path (HYBRID_MLA_ATTN=simt)
//    where both apply, the realistic ones also through cuDNN (HYBRID_ATTN=cudnn) in a build
//    that has it; the backward takes the CPU's out and lse (bf16 / fp32), so it is
//    checked on its own; run twice, bit-identical (deterministic);
//  - rope forward/backward: per head in place on q's rope slices, and the shared key (NH = 1),
//    at pos0 = 0 and 1000;
//  - split_kv, build_k (and their backwards), sigmoid gate (vector and scalar paths);
//  - the absorbed decode: against the CPU's, prefill-shaped (Nq = Tc) and one step (Nq = 1),
//    with caches longer than the kernel's 256-row chunk, and against the decompressed form's
//    last row (e = chat W_kvb^T, k = [k_nope | kr], attention_qkv_forward on the CPU).
// Under HYBRID_CUDA_EMU (the CPU emulator, tests/cuda_emu/) only small shapes run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"
#include "model/ops/mla/mla.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

const MlaOps *cuda_mla_ops(void);  // kernels/mla/table.cu (the backend does not hand it out yet)

static const MlaOps *M;

// ---------------------------------------------------------------------------
// attention

enum { LAY_CONTIG, LAY_MLA, LAY_PACKED, LAY_MQA };
static const char *lay_name[] = {"contiguous", "MLA slices", "packed row", "MQA k head stride 0"};

// Where q, k, v live: buffer index (0..2), first element, strides (elements), width.
typedef struct {
    int buf;
    size_t off;
    int row, head, w;
} Slot;

typedef struct {
    AttnLayout L;
    int nbuf;
    size_t bufn[3];
    Slot s[3];  // q, k, v
} AttnCase;

static AttnCase make_case(int lay, int B, int T, int NH, int dqk, int dv, int dn) {
    AttnCase c;
    memset(&c, 0, sizeof c);
    const size_t N = (size_t)B * T;
    int qr = NH * dqk, kr = NH * dqk, vr = NH * dv, kh = dqk, vh = dv;
    switch (lay) {
        case LAY_CONTIG:
        case LAY_MQA:
            c.nbuf = 3;
            c.s[0] = (Slot){0, 0, qr, dqk, dqk};
            c.s[1] = (Slot){1, 0, kr, lay == LAY_MQA ? 0 : kh, dqk};
            c.s[2] = (Slot){2, 0, vr, vh, dv};
            c.bufn[0] = N * qr, c.bufn[1] = N * kr, c.bufn[2] = N * vr;
            break;
        case LAY_MLA: {  // model/mixer_mla.c layout_of: v = e + dn, e (N, NH*(dn+dv))
            const int de = dn + dv;
            c.nbuf = 3;
            c.s[0] = (Slot){0, 0, qr, dqk, dqk};
            c.s[1] = (Slot){1, 0, kr, kh, dqk};
            c.s[2] = (Slot){2, (size_t)dn, NH * de, de, dv};
            c.bufn[0] = N * qr, c.bufn[1] = N * kr, c.bufn[2] = N * NH * de;
            break;
        }
        default: {  // packed row [q | pad 8 | k | v heads with stride dv + 8 | pad 8]
            const size_t ko = (size_t)NH * dqk + 8, vo = ko + (size_t)NH * dqk;
            const int W = (int)(vo + (size_t)NH * (dv + 8) + 8);
            c.nbuf = 1;
            c.s[0] = (Slot){0, 0, W, dqk, dqk};
            c.s[1] = (Slot){0, ko, W, dqk, dqk};
            c.s[2] = (Slot){0, vo, W, dv + 8, dv};
            c.bufn[0] = N * W;
        }
    }
    c.L = (AttnLayout){B, T, NH, dqk, dv, c.s[0].row, c.s[0].head, c.s[1].row, c.s[1].head, c.s[2].row, c.s[2].head,
                       1.0 / sqrt((double)dqk)};
    return c;
}

// the n = B*T*NH*w addressed elements of a slot, compact (row, head, i)
static float *gather(const float *buf, const Slot *s, const AttnLayout *L) {
    const size_t N = (size_t)L->B * L->T;
    float *out = xmalloc(sizeof(float) * N * L->NH * s->w);
    for (size_t r = 0; r < N; r++)
        for (int h = 0; h < L->NH; h++)
            for (int i = 0; i < s->w; i++)
                out[(r * L->NH + h) * s->w + i] = buf[s->off + r * s->row + (size_t)h * s->head + i];
    return out;
}

// marks (1) the addressed elements of a slot in mask
static void mark(unsigned char *mask, const Slot *s, const AttnLayout *L) {
    const size_t N = (size_t)L->B * L->T;
    for (size_t r = 0; r < N; r++)
        for (int h = 0; h < L->NH; h++)
            for (int i = 0; i < s->w; i++) mask[s->off + r * s->row + (size_t)h * s->head + i] = 1;
}

// path 0 our default kernels, 1 HYBRID_MLA_ATTN=simt, 2 cuDNN's flash attention (HYBRID_ATTN=cudnn,
// the default where the build has cuDNN; shapes it refuses run our kernels, said on stderr)
static void set_path(int path) {
    if (path == 1) setenv("HYBRID_MLA_ATTN", "simt", 1);
    else unsetenv("HYBRID_MLA_ATTN");
    cuda_attention_set_cudnn(path == 2);
}

// paths: DEF the default (tensor cores where they apply); BOTH also HYBRID_MLA_ATTN=simt where
// the default is the tensor-core path (widths and strides multiples of 8); CUDNN also cuDNN's,
// in a build that has it
enum { DEF = 1, BOTH = 3, CUDNN = 4 };
static const char *path_name[3] = {"default path", "SIMT", "cuDNN"};

// The GPU's backward of one case on the current path, twice (bit-identical), against the
// CPU's gradients gb (in buffers shaped like the inputs'); the elements outside q, k, v of the
// gradient buffers must keep their poison.
static void attention_backward(const AttnCase *c, float *const gb[3], const void *dd, const void *od2,
                               const float *ld2, const void *dq_in, const void *dk_in, const void *dv_in) {
    const AttnLayout *L = &c->L;
    const size_t N = (size_t)L->B * L->T;
    void *dg[3] = {0};
    for (int i = 0; i < c->nbuf; i++) dg[i] = dev_bf16(NULL, c->bufn[i]);
    float *first[3] = {0};
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < c->nbuf; i++) poison_bf16(dg[i], c->bufn[i]);
        M->attention_qkv_backward(backend_offset(G, dg[c->s[0].buf], c->s[0].off),
                                  backend_offset(G, dg[c->s[1].buf], c->s[1].off),
                                  backend_offset(G, dg[c->s[2].buf], c->s[2].off), dd, dq_in, dk_in, dv_in, od2,
                                  (const real *)ld2, L);
        float *got[3];
        for (int i = 0; i < c->nbuf; i++) got[i] = get_bf16(dg[i], c->bufn[i]);
        if (rep == 0) {
            const char *nm[3] = {"backward dq", "backward dk", "backward dv"};
            for (int p = 0; p < 3; p++) {
                float *ref = gather(gb[c->s[p].buf], &c->s[p], L), *g = gather(got[c->s[p].buf], &c->s[p], L);
                expect(nm[p], rel_rms(g, ref, N * L->NH * c->s[p].w), TOL_GRAD);
                free(ref), free(g);
            }
            size_t touched = 0;
            for (int i = 0; i < c->nbuf; i++) {
                unsigned char *mask = calloc(c->bufn[i], 1);
                for (int p = 0; p < 3; p++)
                    if (c->s[p].buf == i) mark(mask, &c->s[p], L);
                for (size_t e = 0; e < c->bufn[i]; e++) touched += !mask[e] && !isnan(got[i][e]);
                free(mask);
            }
            CHECK(touched == 0, "attention backward wrote %zu elements outside q, k, v", touched);
            for (int i = 0; i < c->nbuf; i++) first[i] = got[i];
        } else {
            int same = 1;
            for (int i = 0; i < c->nbuf; i++) {
                same &= !memcmp(first[i], got[i], sizeof(float) * c->bufn[i]);
                free(got[i]), free(first[i]);
            }
            CHECK(same, "attention backward differs between two runs");
        }
    }
    for (int i = 0; i < c->nbuf; i++) G->free(dg[i]);
}

// Forward (and, unless MQA, backward) of one case: the CPU reference once, then each path.
static void attention(int paths, int lay, int B, int T, int NH, int dqk, int dv, int dn) {
    AttnCase c = make_case(lay, B, T, NH, dqk, dv, dn);
    const AttnLayout *L = &c.L;
    if (!(dqk % 8 == 0 && dv % 8 == 0 && (lay != LAY_MLA || dn % 8 == 0))) paths = DEF;  // SIMT anyway
    if (!cuda_attention_cudnn_built()) paths &= ~CUDNN;
    const size_t N = (size_t)B * T, no = N * NH * dv, nl = N * NH;
    float *hb[3] = {0}, *gb[3] = {0};
    void *db[3] = {0};
    for (int i = 0; i < c.nbuf; i++) {
        hb[i] = host_rand(c.bufn[i], 1.5f, 0);  // scores of std ~0.75 / (1/sqrt 3): some peaked rows
        db[i] = dev_bf16(hb[i], c.bufn[i]);
    }
    const float *hq = hb[c.s[0].buf] + c.s[0].off, *hk = hb[c.s[1].buf] + c.s[1].off,
                *hv = hb[c.s[2].buf] + c.s[2].off;
    const void *dq_in = backend_offset(G, db[c.s[0].buf], c.s[0].off),
               *dk_in = backend_offset(G, db[c.s[1].buf], c.s[1].off),
               *dv_in = backend_offset(G, db[c.s[2].buf], c.s[2].off);
    // CPU: forward; backward on its (bf16-rounded) out and lse, which the GPU backward takes too
    float *out = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * nl), *dout = NULL;
    cpu_attention_qkv_forward(out, lse, hq, hk, hv, L);
    float *outb = xmalloc(sizeof(float) * no);
    for (size_t i = 0; i < no; i++) outb[i] = bf16_round(out[i]);
    if (lay != LAY_MQA) {
        dout = host_rand(no, 1, 0);
        for (int i = 0; i < c.nbuf; i++) gb[i] = calloc(c.bufn[i], sizeof(float));
        cpu_attention_qkv_backward(gb[c.s[0].buf] + c.s[0].off, gb[c.s[1].buf] + c.s[1].off,
                                   gb[c.s[2].buf] + c.s[2].off, dout, hq, hk, hv, outb, lse, L);
    }
    void *od = dev_bf16(NULL, no), *dd = dout ? dev_bf16(dout, no) : NULL, *od2 = dev_bf16(outb, no);
    float *ld = dev_f32(NULL, nl), *ld2 = dev_f32(lse, nl);
    for (int path = 0; path < 3; path++) {
        if (!(paths & (1 << path))) continue;
        printf("attention %s B=%d T=%d NH=%d dqk=%d dv=%d [%s]\n", lay_name[lay], B, T, NH, dqk, dv,
               path_name[path]);
        set_path(path);
        poison_bf16(od, no);
        poison_f32(ld, nl);
        M->attention_qkv_forward(od, (real *)ld, dq_in, dk_in, dv_in, L);
        cmp_bf16("forward out", od, out, no, TOL_OUT);
        cmp_f32("forward lse (fp32)", ld, lse, nl, TOL_F32);
        if (dout) attention_backward(&c, gb, dd, od2, ld2, dq_in, dk_in, dv_in);
        set_path(0);
    }
    for (int i = 0; i < c.nbuf; i++) G->free(db[i]), free(hb[i]), free(gb[i]);
    G->free(od), G->free(od2), G->free(ld), G->free(ld2);
    if (dd) G->free(dd);
    free(out), free(outb), free(lse), free(dout);
}

// ---------------------------------------------------------------------------
// rope

static void test_rope(int B, int T, int NH, int dn, int dr, int pos0) {
    printf("rope B=%d T=%d NH=%d dn=%d dr=%d pos0=%d\n", B, T, NH, dn, dr, pos0);
    const int dqk = dn + dr;
    const size_t N = (size_t)B * T, nq = N * NH * dqk, nk = N * dr;
    const double base = 10000.0;
    for (int back = 0; back < 2; back++) {
        // per head, in place on q's rope slices (the other columns must stay)
        float *q = host_rand(nq, 1, 0), *ref = host_dup(q, nq);
        (back ? cpu_rope_backward : cpu_rope_forward)(ref + dn, ref + dn, B, T, NH, dr, NH * dqk, dqk, pos0, base);
        void *qd = dev_bf16(q, nq);
        real *qs = backend_offset(G, qd, (size_t)dn);
        (back ? M->rope_backward : M->rope_forward)(qs, qs, B, T, NH, dr, NH * dqk, dqk, pos0, base);
        cmp_bf16(back ? "backward q slices (in place)" : "forward q slices (in place)", qd, ref, nq, TOL_OUT);
        // the shared key (NH = 1, head stride 0), out of place
        float *k = host_rand(nk, 1, 0), *kref = xmalloc(sizeof(float) * nk);
        (back ? cpu_rope_backward : cpu_rope_forward)(kref, k, B, T, 1, dr, dr, 0, pos0, base);
        void *kd = dev_bf16(k, nk), *kod = dev_bf16(NULL, nk);
        poison_bf16(kod, nk);
        (back ? M->rope_backward : M->rope_forward)(kod, kd, B, T, 1, dr, dr, 0, pos0, base);
        cmp_bf16(back ? "backward shared key" : "forward shared key", kod, kref, nk, back ? TOL_GRAD : TOL_OUT);
        G->free(qd), G->free(kd), G->free(kod);
        free(q), free(ref), free(k), free(kref);
    }
}

// ---------------------------------------------------------------------------
// split_kv, build_k, sigmoid gate

static void test_latent(int N, int NH, int r, int dn, int dr, int dv) {
    printf("split_kv / build_k N=%d NH=%d r=%d dn=%d dr=%d dv=%d\n", N, NH, r, dn, dr, dv);
    const size_t nkv = (size_t)N * (r + dr), nc = (size_t)N * r, nkr = (size_t)N * dr;
    const size_t ne = (size_t)N * NH * (dn + dv), nk = (size_t)N * NH * (dn + dr);
    // split: forward and backward
    float *kv = host_rand(nkv, 1, 0), *c = xmalloc(sizeof(float) * nc), *kr = xmalloc(sizeof(float) * nkr);
    cpu_mla_split_kv_forward(c, kr, kv, N, r, dr);
    void *kvd = dev_bf16(kv, nkv), *cd = dev_bf16(NULL, nc), *krd = dev_bf16(NULL, nkr), *kv2 = dev_bf16(NULL, nkv);
    poison_bf16(cd, nc), poison_bf16(krd, nkr), poison_bf16(kv2, nkv);
    M->mla_split_kv_forward(cd, krd, kvd, N, r, dr);
    cmp_bf16("split_kv forward c", cd, c, nc, TOL_OUT);
    cmp_bf16("split_kv forward kr", krd, kr, nkr, TOL_OUT);
    M->mla_split_kv_backward(kv2, cd, krd, N, r, dr);  // the concatenation restores kv
    cmp_bf16("split_kv backward dkv", kv2, kv, nkv, TOL_GRAD);
    // build_k
    float *e = host_rand(ne, 1, 0), *k = xmalloc(sizeof(float) * nk);
    cpu_mla_build_k_forward(k, e, kr, N, NH, dn, dv, dr);
    void *ed = dev_bf16(e, ne), *kd = dev_bf16(NULL, nk);
    poison_bf16(kd, nk);
    M->mla_build_k_forward(kd, ed, krd, N, NH, dn, dv, dr);
    cmp_bf16("build_k forward k", kd, k, nk, TOL_OUT);
    // its backward writes de's k_nope columns and leaves the v columns as they were
    float *dk = host_rand(nk, 1, 0), *de = host_rand(ne, 1, 0), *dkr = xmalloc(sizeof(float) * nkr);
    cpu_mla_build_k_backward(de, dkr, dk, N, NH, dn, dv, dr);  // in place over de's copy below
    float *de0 = host_rand(ne, 1, 0);
    for (size_t n = 0; n < (size_t)N * NH; n++)
        for (int i = dn; i < dn + dv; i++) de[n * (dn + dv) + i] = de0[n * (dn + dv) + i];
    void *dkd = dev_bf16(dk, nk), *ded = dev_bf16(de0, ne), *dkrd = dev_bf16(NULL, nkr);
    poison_bf16(dkrd, nkr);
    M->mla_build_k_backward(ded, dkrd, dkd, N, NH, dn, dv, dr);
    cmp_bf16("build_k backward de (v columns kept)", ded, de, ne, TOL_GRAD);
    cmp_bf16("build_k backward dkr (sum over heads)", dkrd, dkr, nkr, TOL_GRAD);
    G->free(kvd), G->free(cd), G->free(krd), G->free(kv2), G->free(ed), G->free(kd), G->free(dkd), G->free(ded),
        G->free(dkrd);
    free(kv), free(c), free(kr), free(e), free(k), free(dk), free(de), free(dkr), free(de0);
}

static void test_gate(size_t n) {
    printf("sigmoid gate n=%zu%s\n", n, n % 8 ? " (scalar path)" : "");
    float *o = host_rand(n, 2, 0), *z = host_rand(n, 6, 0), *dy = host_rand(n, 1, 0);
    float *y = xmalloc(sizeof(float) * n), *d_o = xmalloc(sizeof(float) * n), *dz = xmalloc(sizeof(float) * n);
    cpu_sigmoid_gate_forward(y, o, z, n);
    cpu_sigmoid_gate_backward(d_o, dz, dy, o, z, n);
    void *od = dev_bf16(o, n), *zd = dev_bf16(z, n), *dyd = dev_bf16(dy, n), *yd = dev_bf16(NULL, n),
         *dod = dev_bf16(NULL, n), *dzd = dev_bf16(NULL, n);
    poison_bf16(yd, n), poison_bf16(dod, n), poison_bf16(dzd, n);
    M->sigmoid_gate_forward(yd, od, zd, n);
    M->sigmoid_gate_backward(dod, dzd, dyd, od, zd, n);
    cmp_bf16("forward y", yd, y, n, TOL_OUT);
    cmp_bf16("backward do", dod, d_o, n, TOL_GRAD);
    cmp_bf16("backward dz", dzd, dz, n, TOL_GRAD);
    G->free(od), G->free(zd), G->free(dyd), G->free(yd), G->free(dod), G->free(dzd);
    free(o), free(z), free(dy), free(y), free(d_o), free(dz);
}

// ---------------------------------------------------------------------------
// absorbed decode

// Nq: the rows of the first check (the last Nq tokens as queries; Nq = Tc: prefill-shaped)
static void test_absorbed(int Tc, int Nq, int NH, int r, int dn, int dr, int dv) {
    printf("absorbed decode Tc=%d Nq=%d NH=%d r=%d dn=%d dr=%d dv=%d\n", Tc, Nq, NH, r, dn, dr, dv);
    const int dqk = dn + dr, dc = r + dr;
    const double scale = 1.0 / sqrt((double)dqk);
    const size_t nq = (size_t)Tc * NH * dqk, ncache = (size_t)Tc * dc, nw = (size_t)NH * (dn + dv) * r;
    float *q = host_rand(nq, 1.5f, 0), *cache = host_rand(ncache, 1, 0);
    float *w = host_rand(nw, (float)(2 / sqrt((double)r)), 0);
    void *qd = dev_bf16(q, nq), *cd = dev_bf16(cache, ncache), *wd = dev_bf16(w, nw);
    // the last Nq tokens as queries (query i attends rows 0 .. Tc - Nq + i)
    const size_t no = (size_t)Tc * NH * dv, nqo = (size_t)Nq * NH * dv, q0 = (size_t)(Tc - Nq) * NH * dqk;
    float *o = xmalloc(sizeof(float) * nqo);
    cpu_mla_absorbed_attention(o, q + q0, cache, w, Nq, Tc, NH, dn, dr, dv, r, scale);
    void *od = dev_bf16(NULL, no);
    poison_bf16(od, nqo);
    M->mla_absorbed_attention(od, backend_offset(G, qd, q0), cd, wd, Nq, Tc, NH, dn, dr, dv, r, scale);
    cmp_bf16("absorbed last Nq rows vs CPU", od, o, nqo, TOL_OUT);
    // one decode step: the last query against the whole cache
    const size_t n1 = (size_t)NH * dv;
    const real *qlast = backend_offset(G, qd, (size_t)(Tc - 1) * NH * dqk);
    poison_bf16(od, no);
    M->mla_absorbed_attention(od, qlast, cd, wd, 1, Tc, NH, dn, dr, dv, r, scale);
    cmp_bf16("absorbed one step vs CPU", od, o + (size_t)(Nq - 1) * n1, n1, TOL_OUT);
    // ... and against the decompressed form's last row: e = chat W_kvb^T, k = [k_nope | kr]
    float *chat = xmalloc(sizeof(float) * (size_t)Tc * r), *kr = xmalloc(sizeof(float) * (size_t)Tc * dr);
    cpu_mla_split_kv_forward(chat, kr, cache, Tc, r, dr);
    float *e = xmalloc(sizeof(float) * (size_t)Tc * NH * (dn + dv)), *k = xmalloc(sizeof(float) * nq);
    cpu_matmul_forward(e, chat, w, NULL, Tc, r, NH * (dn + dv));
    cpu_mla_build_k_forward(k, e, kr, Tc, NH, dn, dv, dr);
    AttnLayout L = {1, Tc, NH, dqk, dv, NH * dqk, dqk, NH * dqk, dqk, NH * (dn + dv), dn + dv, scale};
    float *odec = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * (size_t)Tc * NH);
    cpu_attention_qkv_forward(odec, lse, q, k, e + dn, &L);
    cmp_bf16("absorbed one step vs decompressed last row", od, odec + (size_t)(Tc - 1) * n1, n1, TOL_OUT);
    G->free(qd), G->free(cd), G->free(wd), G->free(od);
    free(q), free(cache), free(w), free(o), free(chat), free(kr), free(e), free(k), free(odec), free(lse);
}

// ---------------------------------------------------------------------------

int main(void) {
    gpu_test_init("test_mla");
    M = cuda_mla_ops();
#ifdef HYBRID_CUDA_EMU
    // the MLA shape (dqk = 128 + 64, dv = 128) at the tile edges, the 64/64 tiles, the padded
    // 48/32 heads, odd widths (SIMT), MQA; the SIMT path on few cases (its warp sums per key
    // are slow to emulate)
    static const int Ts[] = {1, 63, 64, 65, 200};
    for (int i = 0; i < 5; i++) attention(Ts[i] == 65 ? BOTH : DEF, LAY_MLA, 1, Ts[i], 2, 192, 128, 128);
    attention(DEF, LAY_CONTIG, 2, 65, 2, 192, 128, 0);
    attention(DEF, LAY_CONTIG, 1, 63, 4, 64, 64, 0);
    attention(DEF, LAY_PACKED, 2, 64, 2, 64, 64, 0);
    attention(DEF, LAY_MLA, 1, 200, 3, 64, 64, 48);
    attention(DEF, LAY_PACKED, 2, 65, 3, 48, 32, 0);
    attention(BOTH, LAY_CONTIG, 1, 1, 4, 48, 32, 0);
    attention(DEF, LAY_PACKED, 2, 33, 3, 5, 3, 0);
    attention(DEF, LAY_MLA, 1, 65, 2, 5, 3, 3);
    attention(DEF, LAY_MQA, 2, 65, 3, 192, 128, 0);
    attention(BOTH, LAY_MQA, 1, 63, 2, 48, 32, 0);
    test_rope(2, 9, 3, 8, 8, 0);
    test_rope(1, 5, 2, 128, 64, 1000);
    test_latent(37, 3, 24, 16, 8, 12);
    test_gate(8 * 301);
    test_gate(1001);
    test_absorbed(7, 7, 3, 24, 16, 8, 12);
    test_absorbed(300, 3, 2, 64, 32, 16, 32);  // more rows than one 256-row chunk
#else
    // realistic: Kimi-Linear-like MLA heads at B=4 T=1024 NH=6, then the edges and odd sizes
    attention(BOTH | CUDNN, LAY_MLA, 4, 1024, 6, 192, 128, 128);
    attention(BOTH | CUDNN, LAY_CONTIG, 2, 1000, 4, 192, 128, 0);
    static const int Ts[] = {1, 63, 64, 65, 200};
    for (int i = 0; i < 5; i++) attention(BOTH | CUDNN, LAY_MLA, 2, Ts[i], 3, 192, 128, 128);
    attention(BOTH | CUDNN, LAY_CONTIG, 4, 1024, 8, 64, 64, 0);
    attention(BOTH | CUDNN, LAY_PACKED, 2, 333, 4, 64, 64, 0);
    attention(BOTH, LAY_MLA, 2, 200, 3, 64, 64, 48);
    attention(BOTH, LAY_PACKED, 2, 65, 3, 48, 32, 0);
    attention(BOTH, LAY_CONTIG, 2, 200, 4, 48, 32, 0);
    attention(BOTH, LAY_PACKED, 2, 65, 3, 5, 3, 0);
    attention(BOTH, LAY_MLA, 2, 129, 2, 40, 24, 13);  // dn odd: v slices unaligned (SIMT)
    attention(BOTH, LAY_MQA, 4, 1024, 6, 192, 128, 0);
    attention(BOTH, LAY_MQA, 2, 63, 2, 48, 32, 0);
    test_rope(4, 1024, 6, 128, 64, 0);
    test_rope(1, 17, 16, 128, 64, 4000);
    test_latent(4096, 6, 512, 128, 64, 128);
    test_gate((size_t)4096 * 6 * 128);
    test_gate(100001);
    test_absorbed(1024, 1024, 6, 512, 128, 64, 128);
    test_absorbed(3000, 16, 4, 512, 128, 64, 128);
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
