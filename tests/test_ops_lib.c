// Smoke test of the shared libraries `make lib` builds (include/hybrid_ops.h): dlopen()
// each, check its element type, and call the chunkwise KDA forward and backward on our
// own buffers; the double library must agree with the ops linked into this test, the
// float library to float precision. Also, in both element types (the float library is the
// trainer's build of the ops): cpu_matmul_forward gives a row the same bits alone (one
// token at a time, as decoding runs it) as inside a tile of rows.
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "include/hybrid_ops.h"
#include "base/rng.h"
#include "testing.h"

#define B_ 2
#define T_ 37
#define H_ 2
#define K_ 8
#define V_ 5
#define CHUNK 16
#define NTOK (B_ * T_ * H_)

typedef size_t (*WsFn)(const LinearDims *, int);
typedef int (*BytesFn)(void);

// The inputs of docs/delta-rule.md, "Test inputs", in double: L2-normalised q, k;
// g = -softplus(N)/2; beta = sigma(N).
static double q[NTOK * K_], k[NTOK * K_], v[NTOK * V_], g[NTOK * K_], beta[NTOK], dout[NTOK * V_];

static void make_inputs(void) {
    Rng r;
    rng_seed(&r, 17);
    for (int i = 0; i < NTOK; i++) {
        double nq = 0, nk = 0;
        for (int d = 0; d < K_; d++) {
            q[i * K_ + d] = rng_normal(&r);
            k[i * K_ + d] = rng_normal(&r);
            nq += q[i * K_ + d] * q[i * K_ + d];
            nk += k[i * K_ + d] * k[i * K_ + d];
            g[i * K_ + d] = -0.5 * log1p(exp(rng_normal(&r)));
        }
        for (int d = 0; d < K_; d++) q[i * K_ + d] /= sqrt(nq), k[i * K_ + d] /= sqrt(nk);
        for (int d = 0; d < V_; d++) v[i * V_ + d] = rng_normal(&r), dout[i * V_ + d] = rng_normal(&r);
        beta[i] = 1.0 / (1.0 + exp(-rng_normal(&r)));
    }
}

// Runs kda_chunk_forward / backward from `lib` in element type `bytes` (4 or 8) and
// returns o followed by dq, dk, dv, dg, dbeta as doubles in out (NTOK*(2V+3K+1)).
static void run_lib(void *lib, int bytes, double *out) {
    typedef void (*FwdF)(float *, float *, const float *, const float *, const float *, const float *,
                         const float *, const float *, float, const LinearDims *, int, void *);
    typedef void (*BwdF)(float *, float *, float *, float *, float *, float *, const float *, const float *,
                         const float *, const float *, const float *, const float *, const float *, const float *,
                         float, const LinearDims *, int, void *);
    typedef void (*FwdD)(double *, double *, const double *, const double *, const double *, const double *,
                         const double *, const double *, double, const LinearDims *, int, void *);
    typedef void (*BwdD)(double *, double *, double *, double *, double *, double *, const double *, const double *,
                         const double *, const double *, const double *, const double *, const double *,
                         const double *, double, const LinearDims *, int, void *);
    void *fwd = dlsym(lib, "kda_chunk_forward"), *bwd = dlsym(lib, "kda_chunk_backward");
    WsFn wsf = (WsFn)dlsym(lib, "delta_chunk_fwd_workspace_size"), wsb = (WsFn)dlsym(lib, "delta_chunk_bwd_workspace_size");
    if (!fwd || !bwd || !wsf || !wsb) {
        CHECK(0, "missing symbols: %s", dlerror());
        return;
    }
    LinearDims d = linear_dims(B_, T_, H_, K_, V_);
    void *ws = malloc(wsf(&d, CHUNK) > wsb(&d, CHUNK) ? wsf(&d, CHUNK) : wsb(&d, CHUNK));
    const size_t nk = NTOK * K_, nv = NTOK * V_;
    const double scale = 1.0 / sqrt((double)K_);
    double *o = out, *dq = o + nv, *dk = dq + nk, *dv = dk + nk, *dg = dv + nv, *db = dg + nk;
    if (bytes == 8) {
        ((FwdD)fwd)(o, NULL, q, k, v, g, beta, NULL, scale, &d, CHUNK, ws);
        ((BwdD)bwd)(dq, dk, dv, dg, db, NULL, dout, NULL, q, k, v, g, beta, NULL, scale, &d, CHUNK, ws);
    } else {  // through float copies
        const double *src[6] = {q, k, v, g, beta, dout};
        const size_t len[6] = {nk, nk, nv, nk, NTOK, nv};
        float *f[6], *res[6];
        const size_t rl[6] = {nv, nk, nk, nv, nk, NTOK};
        for (int i = 0; i < 6; i++) {
            f[i] = malloc(sizeof(float) * len[i]);
            for (size_t j = 0; j < len[i]; j++) f[i][j] = (float)src[i][j];
            res[i] = malloc(sizeof(float) * rl[i]);
        }
        ((FwdF)fwd)(res[0], NULL, f[0], f[1], f[2], f[3], f[4], NULL, (float)scale, &d, CHUNK, ws);
        ((BwdF)bwd)(res[1], res[2], res[3], res[4], res[5], NULL, f[5], NULL, f[0], f[1], f[2], f[3], f[4], NULL,
                    (float)scale, &d, CHUNK, ws);
        double *dst[6] = {o, dq, dk, dv, dg, db};
        for (int i = 0; i < 6; i++) {
            for (size_t j = 0; j < rl[i]; j++) dst[i][j] = res[i][j];
            free(f[i]);
            free(res[i]);
        }
    }
    free(ws);
}

// rows 0..N-1 through cpu_matmul_forward of `lib` at once, then in every split into pieces
// of 1, 2 and 3 rows: the outputs must be the same bits (memcmp)
static void check_matmul_rows(void *lib, int bytes, const char *name) {
    typedef void (*MmF)(void *, const void *, const void *, const void *, int, int, int);
    MmF mm = (MmF)dlsym(lib, "cpu_matmul_forward");
    CHECK(mm != NULL, "%s: cpu_matmul_forward missing", name);
    if (!mm) return;
    enum { N = 7, C = 37, OC = 11 };
    Rng r;
    rng_seed(&r, 5);
    char *x = malloc((size_t)N * C * bytes), *w = malloc((size_t)OC * C * bytes), *b = malloc((size_t)OC * bytes);
    char *all = malloc((size_t)N * OC * bytes), *piece = malloc((size_t)N * OC * bytes);
    for (int i = 0; i < N * C; i++) {
        double v = rng_normal(&r);
        if (bytes == 4) ((float *)x)[i] = (float)v;
        else ((double *)x)[i] = v;
    }
    for (int i = 0; i < OC * C; i++) {
        double v = rng_normal(&r);
        if (bytes == 4) ((float *)w)[i] = (float)v;
        else ((double *)w)[i] = v;
    }
    for (int i = 0; i < OC; i++) {
        if (bytes == 4) ((float *)b)[i] = (float)rng_normal(&r);
        else ((double *)b)[i] = rng_normal(&r);
    }
    mm(all, x, w, b, N, C, OC);
    for (int len = 1; len <= 3; len++) {
        for (int i0 = 0; i0 < N; i0 += len) {
            int n = i0 + len <= N ? len : N - i0;
            mm(piece + (size_t)i0 * OC * bytes, x + (size_t)i0 * C * bytes, w, b, n, C, OC);
        }
        CHECK(!memcmp(all, piece, (size_t)N * OC * bytes), "%s: matmul rows in pieces of %d differ from one call",
              name, len);
    }
    free(x), free(w), free(b), free(all), free(piece);
}

static void *open_lib(const char *name) {
    const char *dir = getenv("HYBRID_LIB_DIR") ? getenv("HYBRID_LIB_DIR") : "out/lib";
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "dlopen %s: %s (run `make lib`)", path, dlerror());
    return lib;
}

int main(void) {
    make_inputs();
    const size_t n = NTOK * (2 * V_ + 3 * K_ + 1);
    double *ref = calloc(n, sizeof(double)), *got = calloc(n, sizeof(double));
    // the reference: the ops linked into this (double) test binary
    {
        LinearDims d = linear_dims(B_, T_, H_, K_, V_);
        size_t a = delta_chunk_fwd_workspace_size(&d, CHUNK), b = delta_chunk_bwd_workspace_size(&d, CHUNK);
        void *ws = malloc(a > b ? a : b);
        const size_t nk = NTOK * K_, nv = NTOK * V_;
        double *o = ref, *dq = o + nv, *dk = dq + nk, *dv = dk + nk, *dg = dv + nv, *db = dg + nk;
        const double scale = 1.0 / sqrt((double)K_);
        kda_chunk_forward(o, NULL, q, k, v, g, beta, NULL, scale, &d, CHUNK, ws);
        kda_chunk_backward(dq, dk, dv, dg, db, NULL, dout, NULL, q, k, v, g, beta, NULL, scale, &d, CHUNK, ws);
        free(ws);
    }
    const char *names[2] = {"libhybrid_ops_f64.so", "libhybrid_ops.so"};
    const int bytes[2] = {8, 4};
    const double tol[2] = {1e-13, 1e-5};
    for (int i = 0; i < 2; i++) {
        void *lib = open_lib(names[i]);
        if (!lib) continue;
        BytesFn rb = (BytesFn)dlsym(lib, "hybrid_ops_real_bytes");
        CHECK(rb && rb() == bytes[i], "%s: hybrid_ops_real_bytes", names[i]);
        if (!rb || rb() != bytes[i]) continue;
        check_matmul_rows(lib, bytes[i], names[i]);
        memset(got, 0, n * sizeof(double));
        run_lib(lib, bytes[i], got);
        double maxd = 0, maxr = 0;
        for (size_t j = 0; j < n; j++) {
            double d = fabs(got[j] - ref[j]);
            if (!(d <= maxd)) maxd = d;
            maxr = fmax(maxr, fabs(ref[j]));
        }
        CHECK(maxd / maxr <= tol[i], "%s: kda chunk fwd+bwd differs from the linked ops by %.3e", names[i],
              maxd / maxr);
        printf("%-22s kda_chunk_forward + backward: max |lib - linked| / max |linked| = %.2e\n", names[i],
               maxd / maxr);
        dlclose(lib);
    }
    free(ref);
    free(got);
    TEST_MAIN_END();
}
