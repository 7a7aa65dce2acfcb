/* Micro-benchmark of the CPU reference KDA (not a test; `make test` does not build it).
 * Times the chunkwise forward and backward (and the recurrent forms for comparison) at
 * one size, default B=1, T=1024, H=4, K=V=64, chunk 64, in the float build:
 *
 *   gcc -O2 -fopenmp -std=c11 -D_DEFAULT_SOURCE -I. -o out/bench_kda_cpu tests/bench/kda_cpu.c \
 *       model/ops/delta_rule/chunk_common.c model/ops/delta_rule/chunk_fwd.c model/ops/delta_rule/chunk_bwd.c \
 *       model/ops/delta_rule/recurrent.c model/ops/delta_rule/checks.c base/util.c base/rng.c -lm
 *   OMP_NUM_THREADS=2 out/bench_kda_cpu [T] [H] [K] [V] [chunk] [reps]
 *
 * Reports wall time and process CPU time (all threads) per call, the best of `reps`
 * after one untimed warm-up call (first-touch page faults of the workspace). Inputs
 * follow docs/delta-rule.md, "Test inputs" (L2-normalised q, k; g = -softplus(N(0,1))/2;
 * beta = sigmoid(N(0,1))), so the numbers include the exp() of the relative-form decays.
 * Internally every op accumulates in double, so in the float build the chunkwise and
 * recurrent results usually round to the same floats.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/ops/delta_rule/delta_rule.h"
#include "base/rng.h"
#include "base/util.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static real *randn(Rng *r, size_t n, double sd) {
    real *x = xmalloc(n * sizeof(real));
    for (size_t i = 0; i < n; i++) x[i] = (real)(sd * rng_normal(r));
    return x;
}
static void l2rows(real *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < D; i++) s += (double)x[r * D + i] * x[r * D + i];
        for (int i = 0; i < D; i++) x[r * D + i] = (real)(x[r * D + i] / sqrt(s));
    }
}
static double rel(const real *a, const real *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

typedef struct {
    double wall, cpu;
} Timing;

#define TIME_BEST(best, reps, stmt)                                              \
    do {                                                                         \
        best.wall = best.cpu = 1e30;                                             \
        stmt; /* warm-up */                                                      \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                              \
            double w0 = now_seconds(), c0 = cpu_seconds();                       \
            stmt;                                                                \
            double w = now_seconds() - w0, c = cpu_seconds() - c0;               \
            if (w < best.wall) best.wall = w, best.cpu = c;                      \
        }                                                                        \
    } while (0)

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 1024, H = argc > 2 ? atoi(argv[2]) : 4;
    const int K = argc > 3 ? atoi(argv[3]) : 64, V = argc > 4 ? atoi(argv[4]) : 64;
    const int C = argc > 5 ? atoi(argv[5]) : 64, reps = argc > 6 ? atoi(argv[6]) : 3;
    const int B = 1;
    LinearDims d = linear_dims(B, T, H, K, V);
    const size_t rows = (size_t)B * T * H, nqk = rows * K, nv = rows * V, nh = (size_t)B * H * K * V;
    Rng r;
    rng_seed(&r, 1);
    real *q = randn(&r, nqk, 1), *k = randn(&r, nqk, 1), *v = randn(&r, nv, 1), *g = randn(&r, nqk, 1);
    real *beta = randn(&r, rows, 1), *h0 = randn(&r, nh, 1), *dout = randn(&r, nv, 1), *dhT = randn(&r, nh, 1);
    l2rows(q, rows, K);
    l2rows(k, rows, K);
    for (size_t i = 0; i < nqk; i++) g[i] = (real)(-0.5 * log1p(exp((double)g[i])));
    for (size_t i = 0; i < rows; i++) beta[i] = (real)(1 / (1 + exp(-(double)beta[i])));
    real *o = xmalloc(nv * sizeof(real)), *hT = xmalloc(nh * sizeof(real));
    real *o_ref = xmalloc(nv * sizeof(real)), *hT_ref = xmalloc(nh * sizeof(real));
    real *dq = xmalloc(nqk * sizeof(real)), *dk = xmalloc(nqk * sizeof(real)), *dv = xmalloc(nv * sizeof(real));
    real *dg = xmalloc(nqk * sizeof(real)), *db = xmalloc(rows * sizeof(real)), *dh0 = xmalloc(nh * sizeof(real));
    real *dq_ref = xmalloc(nqk * sizeof(real)), *dg_ref = xmalloc(nqk * sizeof(real));
    real *dk_r = xmalloc(nqk * sizeof(real)), *dv_r = xmalloc(nv * sizeof(real)), *db_r = xmalloc(rows * sizeof(real));
    real *dh0_r = xmalloc(nh * sizeof(real));

    size_t ws_f = delta_chunk_fwd_workspace_size(&d, C), ws_b = delta_chunk_bwd_workspace_size(&d, C);
    size_t ws_rf = delta_recurrent_fwd_workspace_size(&d), ws_rb = delta_recurrent_bwd_workspace_size(&d);
    void *wsf = xmalloc(ws_f), *wsb = xmalloc(ws_b), *wsrf = xmalloc(ws_rf), *wsrb = xmalloc(ws_rb);
    const real scale = (real)(1 / sqrt((double)K));

    printf("KDA CPU reference (%s build), B=%d T=%d H=%d K=%d V=%d chunk=%d, %d threads, best of %d\n", REAL_NAME, B,
           T, H, K, V, C, omp_get_max_threads(), reps);
    printf("workspace: chunk fwd %.2f MB, chunk bwd %.2f MB, recurrent bwd %.2f MB\n", ws_f / 1e6, ws_b / 1e6,
           ws_rb / 1e6);
    Timing cf, cb, rf, rb;
    TIME_BEST(cf, reps, kda_chunk_forward(o, hT, q, k, v, g, beta, h0, scale, &d, C, wsf));
    TIME_BEST(cb, reps,
              kda_chunk_backward(dq, dk, dv, dg, db, dh0, dout, dhT, q, k, v, g, beta, h0, scale, &d, C, wsb));
    TIME_BEST(rf, reps, kda_recurrent_forward(o_ref, hT_ref, q, k, v, g, beta, h0, scale, &d, wsrf));
    TIME_BEST(rb, reps,
              kda_recurrent_backward(dq_ref, dk_r, dv_r, dg_ref, db_r, dh0_r, dout, dhT, q, k, v, g, beta, h0, scale,
                                     &d, wsrb));
    printf("%-28s %10s %10s\n", "", "wall ms", "cpu ms");
    printf("%-28s %10.1f %10.1f\n", "chunk forward", 1e3 * cf.wall, 1e3 * cf.cpu);
    printf("%-28s %10.1f %10.1f\n", "chunk backward", 1e3 * cb.wall, 1e3 * cb.cpu);
    printf("%-28s %10.1f %10.1f\n", "chunk forward + backward", 1e3 * (cf.wall + cb.wall), 1e3 * (cf.cpu + cb.cpu));
    printf("%-28s %10.1f %10.1f\n", "recurrent forward", 1e3 * rf.wall, 1e3 * rf.cpu);
    printf("%-28s %10.1f %10.1f\n", "recurrent backward", 1e3 * rb.wall, 1e3 * rb.cpu);
    printf("chunk vs recurrent (%s): o %.1e, hT %.1e, dq %.1e, dg %.1e\n", REAL_NAME, rel(o, o_ref, nv),
           rel(hT, hT_ref, nh), rel(dq, dq_ref, nqk), rel(dg, dg_ref, nqk));
    return 0;
}
