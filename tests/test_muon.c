// Muon (optim/muon.c), compiled in double:
//  (a) NS5 maps singular values through the quintic φ and into its band, for random
//      matrices of several aspect ratios, badly conditioned and orthogonal ones
//      (singular values from a Jacobi eigen-solver on the small Gram matrix, here);
//  (b) Muon steps equal a hand-written reference (naive matrix products, no library code),
//      and the keller rule equals Keller Jordan's Muon (KellerJordan/Muon, written out in
//      double here) over one and three steps, which the sum form does not;
//  (c) NS5(Xᵀ) = NS5(X)ᵀ;
//  (d) the fused-block APIs equal the single-matrix API on each block;
//  (e) bit-identical results for 1, 2 and 4 OpenMP threads.
//
// The band. One NS step maps every singular value σ to φ(σ) = aσ + bσ³ + cσ⁵ with
// (a, b, c) = (3.4445, −4.7750, 2.0315) and keeps the singular vectors (muon.c). After the
// Frobenius normalisation σ ∈ [0, 1]. φ'(σ) = a + 3bσ² + 5cσ⁴ vanishes at σ² = s with
// 5c s² + 3b s + a = 0: s1 = 0.5545 (local max, φ = 1.2024) and s2 = 1.0501 (local
// min, φ = L = 0.6818). φ decreases on [s1, s2] and increases beyond, so φ maps
// [L, U] with U = φ(L) = 1.1344 onto itself (φ(U) = 0.753 >= L): that is the band the
// iteration settles in; it never converges to 1 (φ(1) = 0.701). Small σ grow by ≤ a per
// step (φ(σ) ≈ aσ), so 5 steps bring σ into [L, U] only from σ >= T_band = 0.0052
// (computed below); σ in [T_low = 0.0015, T_band) land in [L, φ(s1) = 1.2024] (they can
// pass near s1 on the last step), and smaller σ are just amplified, by ≈ a⁵ = 487 when tiny.
// So for 5 steps: σ_out ∈ [0.682, 1.134] whenever σ_min(X)/|X|_F >= 0.0052.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "model/ops/optim/muon.h"
#include "testing.h"

static const double NA = MUON_NS_A, NB = MUON_NS_B, NC = MUON_NS_C;

static double phi(double s) { return NA * s + NB * s * s * s + NC * s * s * s * s * s; }
static double phi_n(double s, int n) {
    for (int i = 0; i < n; i++) s = phi(s);
    return s;
}

static void fill_normal(double *x, size_t n, Rng *r, double std) {
    for (size_t i = 0; i < n; i++) x[i] = std * rng_normal(r);
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static double frob(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// ---------------------------------------------------------------- naive linear algebra
// C (p, r) = A (p, q) @ B (q, r), dot-product order
static void mm(double *C, const double *A, const double *B, int p, int q, int r) {
    for (int i = 0; i < p; i++)
        for (int j = 0; j < r; j++) {
            double s = 0;
            for (int k = 0; k < q; k++) s += A[i * q + k] * B[k * r + j];
            C[i * r + j] = s;
        }
}

static void tr(double *T, const double *A, int p, int q) {  // T (q, p) = A (p, q)ᵀ
    for (int i = 0; i < p; i++)
        for (int j = 0; j < q; j++) T[j * p + i] = A[i * q + j];
}

// Cyclic Jacobi: eigenvalues of the symmetric n x n matrix S (destroyed) into eig.
static void jacobi_eigen(double *S, int n, double *eig) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, diag = 0;
        for (int i = 0; i < n; i++) {
            diag += S[i * n + i] * S[i * n + i];
            for (int j = i + 1; j < n; j++) off += S[i * n + j] * S[i * n + j];
        }
        if (off <= 1e-34 * diag || off == 0) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = S[p * n + q];
                if (apq == 0) continue;
                double theta = (S[q * n + q] - S[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) {  // S <- S P (columns p, q)
                    double skp = S[k * n + p], skq = S[k * n + q];
                    S[k * n + p] = c * skp - s * skq;
                    S[k * n + q] = s * skp + c * skq;
                }
                for (int k = 0; k < n; k++) {  // S <- Pᵀ S (rows p, q)
                    double spk = S[p * n + k], sqk = S[q * n + k];
                    S[p * n + k] = c * spk - s * sqk;
                    S[q * n + k] = s * spk + c * sqk;
                }
            }
    }
    for (int i = 0; i < n; i++) eig[i] = S[i * n + i];
}

// The min(r, c) singular values of X (r, c), ascending, via the small Gram matrix.
static void singular_values(const double *X, int r, int c, double *sv) {
    int m = r < c ? r : c;
    double *T = xmalloc(sizeof(double) * r * c), *G = xmalloc(sizeof(double) * m * m);
    tr(T, X, r, c);
    if (r <= c) mm(G, X, T, r, c, r);  // X Xᵀ
    else mm(G, T, X, c, r, c);         // Xᵀ X
    jacobi_eigen(G, m, sv);
    for (int i = 0; i < m; i++) sv[i] = sqrt(fmax(sv[i], 0.0));
    qsort(sv, m, sizeof(double), cmp_double);
    free(T);
    free(G);
}

// Q (n, n) orthogonal: modified Gram-Schmidt on the rows of a Gaussian matrix.
static void random_orthogonal(double *Q, int n, Rng *r) {
    fill_normal(Q, (size_t)n * n, r, 1.0);
    for (int i = 0; i < n; i++) {
        double *qi = Q + (size_t)i * n;
        for (int j = 0; j < i; j++) {
            const double *qj = Q + (size_t)j * n;
            double d = 0;
            for (int k = 0; k < n; k++) d += qi[k] * qj[k];
            for (int k = 0; k < n; k++) qi[k] -= d * qj[k];
        }
        double nrm = frob(qi, n);
        for (int k = 0; k < n; k++) qi[k] /= nrm;
    }
}

// X (r, c) = U[:, :m] diag(sigma) V[:m, :] with U (r, r), V (c, c) orthogonal, m = min(r, c)
static void with_singular_values(double *X, int r, int c, const double *sigma, Rng *rng) {
    int m = r < c ? r : c;
    double *U = xmalloc(sizeof(double) * r * r), *V = xmalloc(sizeof(double) * c * c);
    random_orthogonal(U, r, rng);
    random_orthogonal(V, c, rng);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += U[i * r + k] * sigma[k] * V[k * c + j];
            X[i * c + j] = s;
        }
    free(U);
    free(V);
}

static double *ns5_copy(const double *X, int r, int c, int steps) {
    double *Y = xmalloc(sizeof(double) * r * c);
    double *w = xmalloc(sizeof(double) * newton_schulz_workspace_size(r, c));
    memcpy(Y, X, sizeof(double) * r * c);
    newton_schulz5(Y, r, c, steps, w);
    free(w);
    return Y;
}

// ---------------------------------------------------------------- (a) the band
static double g_L, g_U, g_Tband, g_Tlow;

static void derive_band(void) {
    double disc = 9 * NB * NB - 20 * NA * NC;
    double s1 = sqrt((-3 * NB - sqrt(disc)) / (10 * NC)), s2 = sqrt((-3 * NB + sqrt(disc)) / (10 * NC));
    g_L = phi(s2);
    g_U = phi(g_L);
    printf("phi: local max phi(%.4f) = %.4f, local min phi(%.4f) = %.4f; band [L, U] = [%.5f, %.5f], "
           "phi(U) = %.4f, phi(1) = %.4f\n",
           s1, phi(s1), s2, g_L, g_L, g_U, phi(g_U), phi(1.0));
    CHECK(fabs(s1 - 0.5545) < 1e-4 && fabs(s2 - 1.0501) < 1e-4, "critical points %g %g", s1, s2);
    CHECK(fabs(g_L - 0.6818) < 1e-4 && fabs(g_U - 1.1344) < 1e-4, "band [%g, %g]", g_L, g_U);
    // [L, U] is invariant: φ decreasing on [L, s2] (φ(L) = U, φ(s2) = L), increasing on [s2, U]
    CHECK(s1 < g_L && g_L < s2 && s2 < g_U && phi(g_U) >= g_L && phi(g_U) <= g_U, "band not invariant");
    // Scan σ from 1 downwards: T_band = the smallest σ with φ⁵([σ, 1]) ⊂ [L, U], T_low the
    // smallest with φ⁵([σ, 1]) ≥ L.
    const int N = 1000000;
    g_Tband = g_Tlow = 1.0;
    int in_band = 1, above = 1;
    double hi_mid = 0;  // max of φ⁵ on [T_low, T_band)
    for (int i = N; i >= 1 && above; i--) {
        double s = (double)i / N, y = phi_n(s, 5);
        if (y < g_L - 1e-12) above = 0;
        else g_Tlow = s;
        if (in_band && y > g_U + 1e-12) in_band = 0;
        if (in_band) g_Tband = s;
        else if (above) hi_mid = fmax(hi_mid, y);
    }
    printf("5 steps: phi^5([%.6f, 1]) in [L, U]; phi^5([%.6f, 1]) >= L, max %.4f (phi(s1) = %.4f)\n", g_Tband, g_Tlow,
           hi_mid, phi(s1));
    CHECK(g_Tband > 0.005 && g_Tband < 0.0055, "T_band %g", g_Tband);
    CHECK(g_Tlow > 0.0014 && g_Tlow < 0.0016, "T_low %g", g_Tlow);
    CHECK(hi_mid <= phi(s1) + 1e-12, "max %g", hi_mid);
}

// NS5 of X against the prediction from X's own singular values; band checks.
// sigma_in: X's singular values if known exactly (ascending), else NULL (Jacobi).
static void check_band(const char *name, const double *X, int r, int c, const double *sigma_in, int expect_in_band) {
    int m = r < c ? r : c;
    double *sin = xmalloc(sizeof(double) * m), *sout = xmalloc(sizeof(double) * m), *pred = xmalloc(sizeof(double) * m);
    if (sigma_in) memcpy(sin, sigma_in, sizeof(double) * m);
    else singular_values(X, r, c, sin);
    double f = frob(X, (size_t)r * c) + MUON_NS_EPS;
    for (int i = 0; i < m; i++) pred[i] = phi_n(sin[i] / f, 5);
    qsort(pred, m, sizeof(double), cmp_double);
    double *Y = ns5_copy(X, r, c, 5);
    singular_values(Y, r, c, sout);
    double worst = 0;
    for (int i = 0; i < m; i++) worst = fmax(worst, fabs(sout[i] - pred[i]));
    CHECK(worst < 1e-9, "%s: singular values differ from phi^5 of the input's by %g", name, worst);
    int n_band = 0, bad = 0;
    for (int i = 0; i < m; i++) {
        double s = sin[i] / f;
        // each output σ is φ⁵ of one input σ; the band holds for those above the thresholds
        double y = phi_n(s, 5);
        if (s >= g_Tband) {
            n_band++;
            if (y < g_L - 1e-12 || y > g_U + 1e-12) bad++;
        }
    }
    CHECK(bad == 0, "%s: %d predicted values outside the band", name, bad);
    double in_spread = sin[m - 1] / sin[0], out_spread = sout[m - 1] / sout[0];
    printf("%-24s %3dx%-3d in: sigma/|X|_F [%.3g, %.3g] (ratio %.3g), %d of %d above T_band; out: [%.4f, %.4f] "
           "(ratio %.3f), max |sigma - phi^5| %.2g\n",
           name, r, c, sin[0] / f, sin[m - 1] / f, in_spread, n_band, m, sout[0], sout[m - 1], out_spread, worst);
    if (expect_in_band) {
        CHECK(sin[0] / f >= g_Tband, "%s: input not well enough conditioned for the test (%g)", name, sin[0] / f);
        CHECK(sout[0] >= g_L - 1e-9 && sout[m - 1] <= g_U + 1e-9, "%s: output [%g, %g] outside [L, U]", name, sout[0],
              sout[m - 1]);
        CHECK(sout[0] >= 0.6 && sout[m - 1] <= 1.2, "%s: output [%g, %g] outside [0.6, 1.2]", name, sout[0],
              sout[m - 1]);
        // the spread of a band-limited output is at most U / L = 1.664, whatever the input's
        CHECK(out_spread <= (g_U + 1e-9) / (g_L - 1e-9) && out_spread < in_spread, "%s: spread %g (input %g)", name,
              out_spread, in_spread);
    }
    free(Y);
    free(sin);
    free(sout);
    free(pred);
}

static void test_band(void) {
    derive_band();
    Rng rng;
    rng_seed(&rng, 1);
    // Gaussian matrices: rectangular ones are well conditioned (σ ∈ √n ± √m); for the
    // square one σ_min can be tiny, so only the prediction is checked for it.
    double *X = xmalloc(sizeof(double) * 96 * 96);
    fill_normal(X, 32 * 96, &rng, 0.02);
    check_band("gaussian wide", X, 32, 96, NULL, 1);
    fill_normal(X, 96 * 32, &rng, 3.0);
    check_band("gaussian tall", X, 96, 32, NULL, 1);
    fill_normal(X, 48 * 48, &rng, 1.0);
    check_band("gaussian square", X, 48, 48, NULL, 0);
    fill_normal(X, 64 * 80, &rng, 1.0);
    check_band("gaussian 64x80", X, 64, 80, NULL, 1);

    // Badly conditioned (κ = 30, σ_i geometric): still in the band after 5 steps.
    double sig[64];
    for (int i = 0; i < 40; i++) sig[i] = pow(30.0, -1.0 + (double)i / 39);
    with_singular_values(X, 40, 40, sig, &rng);
    check_band("conditioned k=30", X, 40, 40, sig, 1);
    // κ = 1e3 (40 x 24): part of the spectrum is below T_band; prediction only.
    for (int i = 0; i < 24; i++) sig[i] = pow(1e3, -1.0 + (double)i / 23);
    with_singular_values(X, 40, 24, sig, &rng);
    check_band("conditioned k=1e3 tall", X, 40, 24, sig, 0);
    // κ = 1e6: the smallest σ are only amplified, by ≈ a⁵, not orthogonalised.
    for (int i = 0; i < 24; i++) sig[i] = pow(1e6, -1.0 + (double)i / 23);
    with_singular_values(X, 24, 24, sig, &rng);
    check_band("conditioned k=1e6", X, 24, 24, sig, 0);
    {
        double *Y = ns5_copy(X, 24, 24, 5), sv[24];
        singular_values(Y, 24, 24, sv);
        double s0 = sig[0] / (frob(X, 24 * 24) + MUON_NS_EPS);
        CHECK(rel_err(sv[0], pow(NA, 5) * s0, 0) < 1e-6, "smallest sigma %g, a^5 sigma %g", sv[0], pow(NA, 5) * s0);
        free(Y);
    }

    // Orthogonal Q (n, n): σ = 1 → 1/√n after normalisation, so NS5(Q) = κ Q, κ = φ⁵(1/(√n + eps)).
    double *Q = xmalloc(sizeof(double) * 64 * 64);
    random_orthogonal(Q, 64, &rng);
    double *Y = ns5_copy(Q, 64, 64, 5);
    double kappa = phi_n(1.0 / (frob(Q, 64 * 64) + MUON_NS_EPS), 5), d = 0;
    for (int i = 0; i < 64 * 64; i++) d = fmax(d, fabs(Y[i] - kappa * Q[i]));
    printf("orthogonal 64x64: NS5(Q) = %.6f Q (max deviation %.2g)\n", kappa, d);
    CHECK(d < 1e-12, "NS5(Q) != kappa Q: %g", d);
    CHECK(kappa >= g_L && kappa <= g_U, "kappa %g outside the band", kappa);
    free(Y);
    // Semi-orthogonal wide (32, 96): orthonormal rows (the first 32 rows of a 96 x 96 Q).
    double *Q96 = xmalloc(sizeof(double) * 96 * 96);
    random_orthogonal(Q96, 96, &rng);
    Y = ns5_copy(Q96, 32, 96, 5);
    kappa = phi_n(1.0 / (sqrt(32.0) + MUON_NS_EPS), 5);
    d = 0;
    for (int i = 0; i < 32 * 96; i++) d = fmax(d, fabs(Y[i] - kappa * Q96[i]));
    printf("semi-orthogonal 32x96: NS5(Q) = %.6f Q (max deviation %.2g)\n", kappa, d);
    CHECK(d < 1e-12 && kappa >= g_L && kappa <= g_U, "semi-orthogonal: deviation %g kappa %g", d, kappa);
    free(Y);

    // A zero matrix stays zero; a row vector v goes to φ⁵(|v| / (|v| + eps)) v / |v|.
    double z[6] = {0}, w[64];
    newton_schulz5(z, 2, 3, 5, w);
    CHECK(z[0] == 0 && z[5] == 0, "NS5(0) != 0");
    double v[4] = {0.3, -1.2, 0.5, 2.0}, v0[4];
    memcpy(v0, v, sizeof v);
    newton_schulz5(v, 1, 4, 5, w);
    double nv = frob(v0, 4), k1 = phi_n(nv / (nv + MUON_NS_EPS), 5);
    for (int i = 0; i < 4; i++) CHECK(fabs(v[i] - k1 * v0[i] / nv) < 1e-14, "row vector %d: %g", i, v[i]);
    free(Q);
    free(Q96);
    free(X);
}

// ---------------------------------------------------------------- (b) hand reference
// NS5 written out with naive products: X = G (or Gᵀ if tall), X /= |X|_F + eps,
// 5 x { A = X Xᵀ; A2 = A A; B = b A + c A2; X = a X + B X }.
static void ref_ns5(double *O, const double *G, int r, int c) {
    int tall = r > c, m = tall ? c : r, n = tall ? r : c;
    double *X = xmalloc(sizeof(double) * m * n), *XT = xmalloc(sizeof(double) * m * n);
    double *BX = xmalloc(sizeof(double) * m * n), *A = xmalloc(sizeof(double) * m * m);
    double *A2 = xmalloc(sizeof(double) * m * m), *B = xmalloc(sizeof(double) * m * m);
    if (tall) tr(X, G, r, c);
    else memcpy(X, G, sizeof(double) * r * c);
    double nrm = frob(X, m * n) + 1e-7;
    for (int i = 0; i < m * n; i++) X[i] = X[i] / nrm;
    for (int s = 0; s < 5; s++) {
        tr(XT, X, m, n);
        mm(A, X, XT, m, n, m);
        mm(A2, A, A, m, m, m);
        for (int i = 0; i < m * m; i++) B[i] = -4.7750 * A[i] + 2.0315 * A2[i];
        mm(BX, B, X, m, m, n);
        for (int i = 0; i < m * n; i++) X[i] = 3.4445 * X[i] + BX[i];
    }
    if (tall) tr(O, X, m, n);
    else memcpy(O, X, sizeof(double) * r * c);
    free(X);
    free(XT);
    free(BX);
    free(A);
    free(A2);
    free(B);
}

// One Muon step by the equations of muon.h, in the paper notation (mu M + ...), either form.
static void ref_muon(double *W, const double *G, float *M, int r, int c, double mu, int nesterov, int ema, double lr,
                     double wd, double gs, double scale) {
    double U[64], O[64];
    double k = ema ? 1 - mu : 1;  // the gradient's weight: 1 - mu (EMA) or 1 (sum)
    for (int i = 0; i < r * c; i++) {
        double g = gs * G[i];
        M[i] = (float)(mu * (double)M[i] + k * g);
        U[i] = nesterov ? k * g + mu * (double)M[i] : (double)M[i];
    }
    ref_ns5(O, U, r, c);
    for (int i = 0; i < r * c; i++) W[i] = W[i] * (1 - lr * wd) - lr * scale * O[i];
}

static void hand_case(const char *name, int r, int c, MuonScaleRule rule, double scale, int nesterov, int ema) {
    Rng rng;
    rng_seed(&rng, 7 + r * 10 + c);
    double W[64], Wr[64], G[3][64], work[256];
    float M[64], Mr[64];
    fill_normal(W, r * c, &rng, 0.5);
    memcpy(Wr, W, sizeof W);
    for (int i = 0; i < r * c; i++) M[i] = Mr[i] = (float)(0.1 * rng_normal(&rng));  // nonzero start
    for (int s = 0; s < 3; s++) fill_normal(G[s], r * c, &rng, 1.0);
    MuonConfig mc;
    muon_config_default(&mc);
    mc.scale_rule = rule;
    mc.form = muon_momentum_form(rule);
    mc.nesterov = nesterov;
    CHECK(muon_workspace_size(r, c) <= 256, "workspace");
    double lr[3] = {0.1, 0.05, 0.02}, wd = 0.1, gs[3] = {1.0, 0.5, 0.25};
    for (int s = 0; s < 3; s++) {
        muon_update_matrix(W, G[s], M, r, c, &mc, lr[s], wd, gs[s], work);
        ref_muon(Wr, G[s], Mr, r, c, 0.95, nesterov, ema, lr[s], wd, gs[s], scale);
        CHECK(max_abs_diff(W, Wr, r * c) < 1e-12, "%s step %d: W differs by %g", name, s, max_abs_diff(W, Wr, r * c));
        CHECK(memcmp(M, Mr, sizeof(float) * r * c) == 0, "%s step %d: momentum differs", name, s);
    }
    printf("hand reference %-28s %dx%d: 3 steps, max |W - W_ref| = %.2g\n", name, r, c, max_abs_diff(W, Wr, r * c));
}

static void test_hand(void) {
    CHECK(muon_update_scale(MUON_SCALE_MOONLIGHT, 512, 128) == 0.2 * sqrt(512.0), "moonlight scale");
    CHECK(muon_update_scale(MUON_SCALE_KELLER, 512, 128) == 2.0, "keller scale tall");
    CHECK(muon_update_scale(MUON_SCALE_KELLER, 128, 512) == 1.0, "keller scale wide");
    CHECK(muon_momentum_form(MUON_SCALE_MOONLIGHT) == MUON_MOMENTUM_SUM &&
              muon_momentum_form(MUON_SCALE_NONE) == MUON_MOMENTUM_SUM &&
              muon_momentum_form(MUON_SCALE_KELLER) == MUON_MOMENTUM_EMA,
          "momentum forms of the rules");
    hand_case("2x3 moonlight nesterov", 2, 3, MUON_SCALE_MOONLIGHT, 0.2 * sqrt(3.0), 1, 0);
    hand_case("3x2 keller nesterov", 3, 2, MUON_SCALE_KELLER, sqrt(1.5), 1, 1);
    hand_case("2x4 keller plain", 2, 4, MUON_SCALE_KELLER, 1.0, 0, 1);
    hand_case("2x2 moonlight plain", 2, 2, MUON_SCALE_MOONLIGHT, 0.2 * sqrt(2.0), 0, 0);
    hand_case("4x3 none nesterov", 4, 3, MUON_SCALE_NONE, 1.0, 1, 0);

    // Zero gradient and momentum: only the decay acts.
    double W[6] = {1, 2, 3, 4, 5, 6}, G[6] = {0}, work[64];
    float M[6] = {0};
    MuonConfig mc;
    muon_config_default(&mc);
    muon_update_matrix(W, G, M, 2, 3, &mc, 0.1, 0.5, 1.0, work);
    CHECK(W[0] == 1 * 0.95 && W[5] == 6 * 0.95, "zero grad: %g %g", W[0], W[5]);
}

// ---------------------------------------------------------------- (b') Keller Jordan's Muon
// KellerJordan/Muon (muon.py; modded-nanogpt's Muon is the same), line by line in double,
// from a fresh (zero) momentum buffer as torch starts it:
//   momentum.lerp_(grad, 1 - beta)                      buf = buf + (1 - beta) (g - buf)
//   update = grad.lerp_(momentum, beta) if nesterov else momentum
//   update = zeropower_via_newtonschulz5(update, 5)     (ref_ns5: X / (|X|_F + 1e-7), tall transposed)
//   update *= max(1, rows / cols) ** 0.5
//   p.mul_(1 - lr * weight_decay);  p.add_(update, alpha=-lr)
// The buffer is kept in fp32, as our optimizer state (and torch's buffer of an fp32 weight)
// is; `g` is the gradient after clipping (our grad_scale * G).
static void keller_step(double *W, const double *g, float *buf, int r, int c, double beta, int nesterov, double lr,
                        double wd) {
    const int n = r * c;
    double *upd = xmalloc(sizeof(double) * n), *O = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) buf[i] = (float)((double)buf[i] + (1 - beta) * (g[i] - (double)buf[i]));
    for (int i = 0; i < n; i++) upd[i] = nesterov ? g[i] + beta * ((double)buf[i] - g[i]) : (double)buf[i];
    ref_ns5(O, upd, r, c);
    const double scale = sqrt(fmax(1.0, (double)r / c));
    for (int i = 0; i < n; i++) W[i] = W[i] * (1 - lr * wd) - lr * scale * O[i];
    free(upd);
    free(O);
}

// max |W - W_ref| / max |W_ref - W0|: a deviation measured against the size of the update.
static double update_rel(const double *W, const double *Wref, const double *W0, int n) {
    double d = 0, u = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs(W[i] - Wref[i]));
        u = fmax(u, fabs(Wref[i] - W0[i]));
    }
    return d / u;
}

// Three steps from a zero buffer: muon_update_matrix with the keller rule against
// keller_step (after the first step and after the third); the same steps with the sum
// form (moonlight's momentum under keller's scale, i.e. what the keller rule computed
// before it took the EMA form) and with the moonlight rule must NOT match.
// Returns the sum form's deviation after step 1.
static double keller_case(const char *name, int r, int c, int nesterov) {
    const int n = r * c;
    Rng rng;
    rng_seed(&rng, 101 + 7 * r + c + 1000 * nesterov);
    double *W0 = xmalloc(sizeof(double) * n), *G = xmalloc(sizeof(double) * 3 * n), *g = xmalloc(sizeof(double) * n);
    double *Wk = xmalloc(sizeof(double) * n), *Wref = xmalloc(sizeof(double) * n), *Wsum = xmalloc(sizeof(double) * n);
    double *Wml = xmalloc(sizeof(double) * n), *work = xmalloc(sizeof(double) * muon_workspace_size(r, c));
    float *Mk = xcalloc((size_t)n, sizeof(float)), *buf = xcalloc((size_t)n, sizeof(float));
    float *Msum = xcalloc((size_t)n, sizeof(float)), *Mml = xcalloc((size_t)n, sizeof(float));
    fill_normal(W0, n, &rng, 0.02);
    fill_normal(G, 3 * n, &rng, 1e-3);  // gradient entries of a trained layer's size
    memcpy(Wk, W0, sizeof(double) * n);
    memcpy(Wref, W0, sizeof(double) * n);
    memcpy(Wsum, W0, sizeof(double) * n);
    memcpy(Wml, W0, sizeof(double) * n);
    MuonConfig keller = {0.95, nesterov, 5, MUON_SCALE_KELLER, MUON_MOMENTUM_EMA};
    MuonConfig old_keller = keller, moonlight = keller;
    old_keller.form = MUON_MOMENTUM_SUM;
    moonlight.scale_rule = MUON_SCALE_MOONLIGHT;
    moonlight.form = MUON_MOMENTUM_SUM;
    const double lr[3] = {0.02, 0.015, 0.01}, gs[3] = {1.0, 0.6, 1.0}, wd = 0.01;
    double err[3], err_sum1 = 0, err_ml1 = 0;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < n; i++) g[i] = gs[s] * G[s * n + i];
        muon_update_matrix(Wk, G + s * n, Mk, r, c, &keller, lr[s], wd, gs[s], work);
        muon_update_matrix(Wsum, G + s * n, Msum, r, c, &old_keller, lr[s], wd, gs[s], work);
        muon_update_matrix(Wml, G + s * n, Mml, r, c, &moonlight, lr[s], wd, gs[s], work);
        keller_step(Wref, g, buf, r, c, 0.95, nesterov, lr[s], wd);
        err[s] = update_rel(Wk, Wref, W0, n);
        if (s == 0) {
            err_sum1 = update_rel(Wsum, Wref, W0, n);
            err_ml1 = update_rel(Wml, Wref, W0, n);
        }
        CHECK(memcmp(Mk, buf, sizeof(float) * n) == 0, "%s step %d: the momentum buffer differs from Keller's", name,
              s + 1);
    }
    CHECK(err[0] < 1e-12 && err[2] < 1e-12, "%s: keller differs from Keller Jordan's Muon by %.3g (1 step), %.3g (3 steps)",
          name, err[0], err[2]);
    double err_sum3 = update_rel(Wsum, Wref, W0, n), err_ml3 = update_rel(Wml, Wref, W0, n);
    CHECK(err_sum1 > 1e-6 && err_sum3 > 1e-6, "%s: the sum form matches Keller's Muon (%.3g, %.3g): the test cannot fail",
          name, err_sum1, err_sum3);
    CHECK(err_ml1 > 1e-2 && err_ml3 > 1e-2, "%s: the moonlight rule matches Keller's Muon (%.3g, %.3g)", name, err_ml1,
          err_ml3);
    printf("keller vs Keller Jordan's Muon %-22s %2dx%-2d: |dW| / |update| after 1 step %.2g, 3 steps %.2g; "
           "sum form (the old keller) %.2g, %.2g; moonlight %.2g, %.2g\n",
           name, r, c, err[0], err[2], err_sum1, err_sum3, err_ml1, err_ml3);
    free(W0);
    free(G);
    free(g);
    free(Wk);
    free(Wref);
    free(Wsum);
    free(Wml);
    free(work);
    free(Mk);
    free(buf);
    free(Msum);
    free(Mml);
    return err_sum1;
}

static void test_keller(void) {
    const int shapes[3][2] = {{6, 6}, {4, 9}, {10, 3}};
    const char *names[3] = {"square", "wide", "tall"};
    for (int k = 0; k < 3; k++)
        for (int nesterov = 1; nesterov >= 0; nesterov--) {
            char name[64];
            snprintf(name, sizeof name, "%s, %s", names[k], nesterov ? "nesterov" : "plain");
            keller_case(name, shapes[k][0], shapes[k][1], nesterov);
        }
}

// ---------------------------------------------------------------- (c) transposition
static void test_transpose(void) {
    Rng rng;
    rng_seed(&rng, 3);
    int shapes[3][2] = {{40, 24}, {24, 40}, {30, 30}};
    for (int t = 0; t < 3; t++) {
        int r = shapes[t][0], c = shapes[t][1];
        double *X = xmalloc(sizeof(double) * r * c), *XT = xmalloc(sizeof(double) * r * c);
        double *YT = xmalloc(sizeof(double) * r * c);
        fill_normal(X, (size_t)r * c, &rng, 1.0);
        tr(XT, X, r, c);
        double *Y = ns5_copy(X, r, c, 5), *Z = ns5_copy(XT, c, r, 5);
        tr(YT, Y, r, c);
        double d = max_abs_diff(YT, Z, (size_t)r * c);
        int same = memcmp(YT, Z, sizeof(double) * r * c) == 0;
        printf("NS5(X^T) vs NS5(X)^T, %dx%d: max diff %.2g%s\n", r, c, d, same ? " (bit-identical)" : "");
        CHECK(d < 1e-13, "%dx%d: NS5(X^T) != NS5(X)^T by %g", r, c, d);
        // rectangular: both go through the same (min, max) working layout
        if (r != c) CHECK(same, "%dx%d: not bit-identical", r, c);
        free(X);
        free(XT);
        free(YT);
        free(Y);
        free(Z);
    }
}

// ---------------------------------------------------------------- (d) fused blocks
// blocks[i] rows each; compares the fused call `fused` against muon_update_matrix per block.
static void check_fused(const char *name, const int *blocks, int nb, int cols, int use_even) {
    int rows = 0, maxr = 0;
    for (int i = 0; i < nb; i++) {
        rows += blocks[i];
        maxr = blocks[i] > maxr ? blocks[i] : maxr;
    }
    size_t n = (size_t)rows * cols;
    Rng rng;
    rng_seed(&rng, 11);
    double *W = xmalloc(sizeof(double) * n), *W2 = xmalloc(sizeof(double) * n), *G = xmalloc(sizeof(double) * n);
    float *M = xmalloc(sizeof(float) * n), *M2 = xmalloc(sizeof(float) * n);
    double *work = xmalloc(sizeof(double) * muon_workspace_size(maxr, cols));
    fill_normal(W, n, &rng, 0.1);
    fill_normal(G, n, &rng, 1.0);
    for (size_t i = 0; i < n; i++) M[i] = (float)(0.3 * rng_normal(&rng));
    memcpy(W2, W, sizeof(double) * n);
    memcpy(M2, M, sizeof(float) * n);
    MuonConfig mc;
    muon_config_default(&mc);
    for (int s = 0; s < 2; s++) {
        if (use_even) muon_update_blocks(W, G, M, rows, cols, nb, &mc, 0.01, 0.1, 0.7, work);
        else muon_update_row_splits(W, G, M, blocks, nb, cols, &mc, 0.01, 0.1, 0.7, work);
        size_t off = 0;
        for (int i = 0; i < nb; i++) {
            muon_update_matrix(W2 + off, G + off, M2 + off, blocks[i], cols, &mc, 0.01, 0.1, 0.7, work);
            off += (size_t)blocks[i] * cols;
        }
    }
    CHECK(memcmp(W, W2, sizeof(double) * n) == 0 && memcmp(M, M2, sizeof(float) * n) == 0,
          "%s: fused != per block (max diff %g)", name, max_abs_diff(W, W2, n));
    // n_blocks = 1 is the whole matrix, which differs from the per-block update
    double *W3 = xmalloc(sizeof(double) * n);
    float *M3 = xmalloc(sizeof(float) * n);
    memcpy(W2, W, sizeof(double) * n);
    memcpy(W3, W, sizeof(double) * n);
    memcpy(M3, M, sizeof(float) * n);
    double *work2 = xmalloc(sizeof(double) * muon_workspace_size(rows, cols));
    muon_update_matrix(W2, G, M2, rows, cols, &mc, 0.01, 0.1, 0.7, work2);
    muon_update_blocks(W, G, M, rows, cols, 1, &mc, 0.01, 0.1, 0.7, work2);
    CHECK(memcmp(W, W2, sizeof(double) * n) == 0, "%s: n_blocks = 1 != whole matrix", name);
    if (use_even) muon_update_blocks(W3, G, M3, rows, cols, nb, &mc, 0.01, 0.1, 0.7, work2);
    else muon_update_row_splits(W3, G, M3, blocks, nb, cols, &mc, 0.01, 0.1, 0.7, work2);
    CHECK(max_abs_diff(W3, W2, n) > 1e-6, "%s: per-block update equals the whole-matrix one", name);
    free(W3);
    free(M3);
    printf("fused %-34s (%d, %d) in %d blocks: equal to per-block updates\n", name, rows, cols, nb);
    free(W);
    free(W2);
    free(G);
    free(M);
    free(M2);
    free(work);
    free(work2);
}

static void die_uneven(void *ctx) {
    (void)ctx;
    double W[10], G[10], work[256];
    float M[10];
    MuonConfig mc;
    muon_config_default(&mc);
    muon_update_blocks(W, G, M, 5, 2, 3, &mc, 0.1, 0, 1, work);
}

static void test_fused(void) {
    int qkv[3] = {16, 16, 16};
    check_fused("qkv (3C, C), C = 16", qkv, 3, 16, 1);
    int experts[4] = {24, 24, 24, 24};
    check_fused("experts (E=4, 24, 8) as (96, 8)", experts, 4, 8, 1);
    int gqa[3] = {16, 8, 8};
    check_fused("gqa q/k/v splits 16/8/8", gqa, 3, 16, 0);
    CHECK(expect_death(die_uneven, NULL, "death", "do not split"), "uneven blocks must die");
}

// ---------------------------------------------------------------- (e) determinism
static void test_determinism(void) {
    int shapes[3][2] = {{128, 512}, {512, 128}, {128, 128}};
    for (int t = 0; t < 3; t++) {
        int r = shapes[t][0], c = shapes[t][1];
        size_t n = (size_t)r * c;
        Rng rng;
        rng_seed(&rng, 5 + t);
        double *W0 = xmalloc(sizeof(double) * n), *G = xmalloc(sizeof(double) * n);
        float *M0 = xmalloc(sizeof(float) * n);
        fill_normal(W0, n, &rng, 0.1);
        fill_normal(G, n, &rng, 1.0);
        for (size_t i = 0; i < n; i++) M0[i] = (float)(0.3 * rng_normal(&rng));
        double *work = xmalloc(sizeof(double) * muon_workspace_size(r, c));
        double *Wt[4];
        float *Mt[4];
        int threads[4] = {1, 2, 4, 2};
        MuonConfig mc;
        muon_config_default(&mc);
        double secs = 0;
        for (int k = 0; k < 4; k++) {
            Wt[k] = xmalloc(sizeof(double) * n);
            Mt[k] = xmalloc(sizeof(float) * n);
            memcpy(Wt[k], W0, sizeof(double) * n);
            memcpy(Mt[k], M0, sizeof(float) * n);
            omp_set_num_threads(threads[k]);
            double t0 = now_seconds();
            for (int s = 0; s < 2; s++) muon_update_matrix(Wt[k], G, Mt[k], r, c, &mc, 0.01, 0.1, 1.0, work);
            if (k == 0) secs = (now_seconds() - t0) / 2;
        }
        for (int k = 1; k < 4; k++)
            CHECK(memcmp(Wt[0], Wt[k], sizeof(double) * n) == 0 && memcmp(Mt[0], Mt[k], sizeof(float) * n) == 0,
                  "%dx%d: %d threads differ from 1 thread", r, c, threads[k]);
        printf("determinism %dx%d: bit-identical with 1, 2, 4 threads and on a rerun (1 thread: %.1f ms/step, double)\n",
               r, c, secs * 1e3);
        for (int k = 0; k < 4; k++) {
            free(Wt[k]);
            free(Mt[k]);
        }
        free(W0);
        free(G);
        free(M0);
        free(work);
    }
}

int main(void) {
    test_band();
    test_hand();
    test_keller();
    test_transpose();
    test_fused();
    test_determinism();
    TEST_MAIN_END();
}
