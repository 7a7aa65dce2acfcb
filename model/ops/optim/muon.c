// Muon on the CPU: Newton-Schulz orthogonalisation and the per-matrix update
// (equations in muon.h; docs/optimizers.md).
#include "model/ops/optim/muon.h"
#include "model/ops/optim/optim.h"

#include <math.h>
#include <string.h>

#include "base/util.h"

// Below this many multiply-adds (m*m*n) per NS product, threads cost more than they save.
#define MUON_PAR_MIN_WORK 32768

void muon_config_default(MuonConfig *mc) {
    mc->momentum = 0.95;
    mc->nesterov = 1;
    mc->ns_steps = MUON_NS_STEPS;
    mc->scale_rule = MUON_SCALE_MOONLIGHT;
    mc->form = muon_momentum_form(MUON_SCALE_MOONLIGHT);
}

double muon_update_scale(MuonScaleRule rule, int rows, int cols) {
    switch (rule) {
    case MUON_SCALE_MOONLIGHT: return 0.2 * sqrt((double)(rows > cols ? rows : cols));
    case MUON_SCALE_KELLER: return sqrt(fmax(1.0, (double)rows / (double)cols));
    case MUON_SCALE_NONE: return 1.0;
    }
    die("muon: unknown scale rule %d", (int)rule);
}

MuonMomentumForm muon_momentum_form(MuonScaleRule rule) {
    switch (rule) {
    case MUON_SCALE_MOONLIGHT: return MUON_MOMENTUM_SUM;
    case MUON_SCALE_KELLER: return MUON_MOMENTUM_EMA;
    case MUON_SCALE_NONE: return MUON_MOMENTUM_SUM;
    }
    die("muon: unknown scale rule %d", (int)rule);
}

const char *muon_momentum_form_name(MuonMomentumForm form) {
    switch (form) {
    case MUON_MOMENTUM_SUM: return "sum";
    case MUON_MOMENTUM_EMA: return "ema";
    }
    die("muon: unknown momentum form %d", (int)form);
}

size_t newton_schulz_workspace_size(int rows, int cols) {
    size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);
    return 3 * m * n + 2 * m * m;
}

size_t muon_workspace_size(int rows, int cols) {
    return (size_t)rows * (size_t)cols + newton_schulz_workspace_size(rows, cols);
}

// dst (cols, rows) = src (rows, cols)ᵀ
static void transpose(real *restrict dst, const real *restrict src, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
}

// y += alpha x. Elementwise, so `omp simd` changes no result (no reassociation).
static inline void axpy(real *restrict y, real alpha, const real *restrict x, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] += alpha * x[j];
}

// y = alpha x + beta y
static inline void axpby(real *restrict y, real alpha, const real *restrict x, real beta, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] = alpha * x[j] + beta * y[j];
}

// S (m, m): copy the upper triangle onto the lower one. The lower entries computed the
// same way would be the same sums of the same products, so this is exact, not a shortcut.
static void mirror_upper(real *S, int m) {
    for (int i = 1; i < m; i++)
        for (int j = 0; j < i; j++) S[(size_t)i * m + j] = S[(size_t)j * m + i];
}

// Why the iteration works: with X = U Σ Vᵀ, A = X Xᵀ = U Σ² Uᵀ and
// (b A + c A²) X = U (b Σ³ + c Σ⁵) Vᵀ, so one step a X + (b A + c A²) X = U φ(Σ) Vᵀ with
// φ(σ) = a σ + b σ³ + c σ⁵ applied to every singular value; the singular vectors stay.
// After the Frobenius normalisation every σ is in [0, 1]; φ has slope a = 3.4445 at 0,
// a local maximum φ(0.5545) = 1.2024 and a local minimum φ(1.0501) = 0.6818, so repeated
// steps pull σ up into the band [0.6818, 1.1344] = [φ(1.0501), φ(0.6818)], which φ maps
// into itself. The result is ≈ U Vᵀ, the orthogonal factor, up to that band.
//
// Layout: x is (m, n) with m <= n (the transpose of a tall input), so A and B are (m, m).
// All three products run as row-wise axpys (contiguous inner loops):
//   A[i,:] = Σ_k x[i,k] xᵀ[k,:]            (xᵀ kept as an (n, m) copy)
//   B[i,:] = b A[i,:] + c Σ_k A[i,k] A[k,:]  (A is symmetric, so A² rows are axpys of A rows)
//   y[i,:] = a x[i,:] + Σ_k B[i,k] x[k,:]
// A and B are symmetric: only their upper triangles are computed. Each output row belongs
// to one thread and sums over k in a fixed order: bit-identical results for any thread count.
void newton_schulz5(real *X, int rows, int cols, int steps, real *work) {
    if (rows <= 0 || cols <= 0) die("newton_schulz5: bad shape (%d, %d)", rows, cols);
    const int tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    real *x = work, *y = x + mn, *xt = y + mn, *A = xt + mn, *B = A + mm;
    const real a = (real)MUON_NS_A, b = (real)MUON_NS_B, c = (real)MUON_NS_C;

    if (tall) transpose(x, X, rows, cols);
    else memcpy(x, X, mn * sizeof(real));

    // Frobenius norm in double, one thread, fixed order.
    double ss = 0.0;
    for (size_t i = 0; i < mn; i++) ss += (double)x[i] * (double)x[i];
    const real denom = (real)(sqrt(ss) + MUON_NS_EPS);
    for (size_t i = 0; i < mn; i++) x[i] /= denom;

    const int par = (size_t)m * m * n >= MUON_PAR_MIN_WORK;
    for (int s = 0; s < steps; s++) {
        transpose(xt, x, m, n);
        // A = x xᵀ, upper triangle (j >= i), then mirrored
#pragma omp parallel for schedule(dynamic, 4) if (par)
        for (int i = 0; i < m; i++) {
            real *Ai = A + (size_t)i * m;
            const real *xi = x + (size_t)i * n;
            memset(Ai + i, 0, (size_t)(m - i) * sizeof(real));
            for (int k = 0; k < n; k++) axpy(Ai + i, xi[k], xt + (size_t)k * m + i, m - i);
        }
        mirror_upper(A, m);
        // B = b A + c A A, upper triangle, then mirrored
#pragma omp parallel for schedule(dynamic, 4) if (par)
        for (int i = 0; i < m; i++) {
            real *Bi = B + (size_t)i * m;
            const real *Ai = A + (size_t)i * m;
            memset(Bi + i, 0, (size_t)(m - i) * sizeof(real));
            for (int k = 0; k < m; k++) axpy(Bi + i, Ai[k], A + (size_t)k * m + i, m - i);
            axpby(Bi + i, b, Ai + i, c, m - i);
        }
        mirror_upper(B, m);
        // y = a x + B x
#pragma omp parallel for schedule(static) if (par)
        for (int i = 0; i < m; i++) {
            real *yi = y + (size_t)i * n;
            const real *Bi = B + (size_t)i * m;
            memset(yi, 0, (size_t)n * sizeof(real));
            for (int k = 0; k < m; k++) axpy(yi, Bi[k], x + (size_t)k * n, n);
            axpby(yi, a, x + (size_t)i * n, (real)1, n);
        }
        real *t = x;
        x = y;
        y = t;
    }

    if (tall) transpose(X, x, m, n);
    else memcpy(X, x, mn * sizeof(real));
}

void muon_update_matrix(real *W, const real *G, float *M, int rows, int cols, const MuonConfig *mc, double lr,
                        double wd, double grad_scale, real *work) {
    if (rows <= 0 || cols <= 0) die("muon_update_matrix: bad shape (%d, %d)", rows, cols);
    const size_t n = (size_t)rows * cols;
    const double mu = mc->momentum;
    real *U = work;
    if (mc->form == MUON_MOMENTUM_EMA) {  // M = mu M + (1 - mu) g,  U = (1 - mu) g + mu M
        const double k = 1.0 - mu;
        for (size_t i = 0; i < n; i++) {
            const double g = grad_scale * (double)G[i];
            const float mi = (float)(mu * (double)M[i] + k * g);
            M[i] = mi;
            U[i] = (real)(mc->nesterov ? k * g + mu * (double)mi : (double)mi);
        }
    } else if (mc->form == MUON_MOMENTUM_SUM) {  // M = mu M + g,  U = g + mu M
        for (size_t i = 0; i < n; i++) {
            const double g = grad_scale * (double)G[i];
            const float mi = (float)(mu * (double)M[i] + g);
            M[i] = mi;
            U[i] = (real)(mc->nesterov ? g + mu * (double)mi : (double)mi);
        }
    } else {
        die("muon_update_matrix: unknown momentum form %d", (int)mc->form);
    }
    newton_schulz5(U, rows, cols, mc->ns_steps, work + n);
    const real decay = (real)(1.0 - lr * wd);
    const real step = (real)(lr * muon_update_scale(mc->scale_rule, rows, cols));
    for (size_t i = 0; i < n; i++) W[i] = W[i] * decay - step * U[i];
}

void muon_update_row_splits(real *W, const real *G, float *M, const int *block_rows, int n_blocks, int cols,
                            const MuonConfig *mc, double lr, double wd, double grad_scale, real *work) {
    if (n_blocks < 1) die("muon_update_row_splits: %d blocks", n_blocks);
    size_t off = 0;
    for (int bi = 0; bi < n_blocks; bi++) {
        const int r = block_rows[bi];
        if (r <= 0) die("muon_update_row_splits: block %d has %d rows", bi, r);
        muon_update_matrix(W + off, G + off, M + off, r, cols, mc, lr, wd, grad_scale, work);
        off += (size_t)r * cols;
    }
}

void muon_update_blocks(real *W, const real *G, float *M, int rows, int cols, int n_blocks, const MuonConfig *mc,
                        double lr, double wd, double grad_scale, real *work) {
    if (n_blocks < 1 || rows % n_blocks != 0)
        die("muon_update_blocks: %d rows do not split into %d equal blocks", rows, n_blocks);
    const int r = rows / n_blocks;
    for (int bi = 0; bi < n_blocks; bi++) {
        const size_t off = (size_t)bi * r * cols;
        muon_update_matrix(W + off, G + off, M + off, r, cols, mc, lr, wd, grad_scale, work);
    }
}

void cpu_muon_update(real *param, const real *grad, float *M, float *master, int rows, int cols, int n_blocks,
                     real momentum, int nesterov, int ns_steps, int scale_rule, real lr, real weight_decay,
                     real grad_scale, real *work) {
    if (master) die("cpu_muon_update: the CPU backend keeps no master weights (master must be NULL)");
    MuonConfig mc = {momentum, nesterov, ns_steps, (MuonScaleRule)scale_rule,
                     muon_momentum_form((MuonScaleRule)scale_rule)};
    muon_update_blocks(param, grad, M, rows, cols, n_blocks, &mc, lr, weight_decay, grad_scale, work);
}
