// Backward passes of KDA, GDN, DeltaNet and linear attention against central finite
// differences in double (inputs of docs/delta-rule.md, "Test inputs"):
// loss L = sum dout∘o + sum dhT∘hT (+ dzT∘zT),
// per tensor max|fd - analytic| / max|fd| <= 1e-6, for every input including the
// initial state, the gate and beta. The recurrent backward (docs/delta-rule.md, "Backward of
// the delta-rule recurrence" and "Backward of linear attention") is the reference; the
// chunkwise backward (docs/delta-rule.md, "Chunkwise backward") is checked the same way at
// chunk size 4.
#include "tests/linear_problem.h"
#include "tests/testing.h"

#define TOL 1e-6
#define EPS 1e-6

typedef struct {
    Prob *p;
    int chunk;
} Ctx;

static double loss(void *ctx) {
    Ctx *c = ctx;
    return prob_loss(c->p, c->chunk);
}

static double worst[2][8];  // [recurrent, chunk][tensor]
static const char *names[8] = {"dq", "dk", "dv", "dg", "dbeta", "dh0", "dz0", ""};

static void fd_case(LinearDims d, int variant, int chunk, int use_h0, int use_dhT, uint64_t seed, const char *label) {
    Prob p;
    prob_init(&p, d, variant, seed, use_h0, use_dhT);
    Result res;
    result_alloc(&res, &p);
    prob_backward(&p, chunk, &res);
    Ctx ctx = {&p, chunk};
    struct {
        real *x, *an;
        size_t n;
        int on;
    } t[7] = {
        {p.q, res.dq, p.nqk, 1},
        {p.k, res.dk, p.nqk, 1},
        {p.v, res.dv, p.nv, 1},
        {p.g, res.dg, p.ng, variant == V_GDN || variant == V_KDA},
        {p.beta, res.dbeta, p.nb, !prob_is_la(&p)},
        {p.h0, res.dh0, p.nh, use_h0},
        {p.z0, res.dz0, p.nz, use_h0 && variant == V_LA},
    };
    printf("%-19s %-26s chunk %d:", variant_name[variant], label, chunk);
    for (int x = 0; x < 7; x++) {
        if (!t[x].on) continue;
        double e = fd_check(loss, &ctx, t[x].x, t[x].n, t[x].an, EPS);
        double *w = &worst[chunk != 0][x];
        if (e > *w) *w = e;
        printf(" %s %.1e", names[x], e);
        CHECK(e <= TOL, "%s %s chunk %d: %s fd rel err %.3e", variant_name[variant], label, chunk, names[x], e);
        CHECK(max_abs(t[x].an, t[x].n) > 0, "%s: analytic %s all zero", label, names[x]);
    }
    printf("\n");
    result_free(&res);
    prob_free(&p);
}

int main(void) {
    static const int offs[] = {0, 4, 4, 13};  // three documents, one of them empty
    for (int variant = V_DELTANET; variant <= V_LA_UNNORM; variant++) {
        for (int chunk = 0; chunk <= 4; chunk += 4) {
            fd_case(linear_dims(2, 11, 2, 5, 3), variant, chunk, 1, 1, 100 + variant, "B=2 T=11 H=2 K=5 V=3");
            fd_case(linear_dims_varlen(13, 2, 4, 3, offs, 3), variant, chunk, 1, 1, 200 + variant,
                    "varlen [0,4,4,13]");
        }
        fd_case(linear_dims(1, 7, 1, 4, 3), variant, 0, 0, 0, 300 + variant, "no h0, no dhT");
    }
    printf("worst fd error:          ");
    for (int x = 0; x < 7; x++) printf(" %s", names[x]);
    printf("\n  recurrent: ");
    for (int x = 0; x < 7; x++) printf(" %.1e", worst[0][x]);
    printf("\n  chunk 4:   ");
    for (int x = 0; x < 7; x++) printf(" %.1e", worst[1][x]);
    printf("\n");
    TEST_MAIN_END();
}
