// Muon (MomentUm Orthogonalized by Newton-Schulz) for 2-D weight matrices: the CPU
// reference. The update rules and their sources are in docs/optimizers.md, "Muon's two
// momentum forms"; NS5 is modded-nanogpt's / KellerJordan/Muon's.
//
// One step on a matrix W (rows, cols) with gradient G and momentum buffer M, mu = momentum:
//   g = grad_scale * G                      (clipping factor, applied first)
//   momentum, in one of two forms (MuonMomentumForm; the scale rule picks it):
//     sum (Moonlight, eq. 4):       M = mu M + g,            U = g + mu M
//     EMA (KellerJordan/Muon):      M = mu M + (1 - mu) g,   U = (1 - mu) g + mu M
//     (U = M without Nesterov; torch: M.lerp_(g, 1 - mu), U = g.lerp(M, mu))
//   O = NS5(U)                              (≈ the orthogonal polar factor of U)
//   W = W * (1 - lr * wd) - lr * scale(rows, cols) * O
// with scale = 0.2 * sqrt(max(rows, cols)) (Moonlight: update RMS ≈ 0.2, like AdamW, so
// the AdamW lr and wd can be reused) or sqrt(max(1, rows / cols)) (KellerJordan/Muon,
// modded-nanogpt: pair it with its own lr, ~0.02). From a zero buffer the EMA buffer is the
// sum buffer times (1 - mu) (up to M's fp32 rounding), so the two forms differ only through
// NS5's 1e-7 in the normalisation X / (||X||_F + 1e-7), which weighs 1 / (1 - mu) times
// (20 times at mu = 0.95) more on the smaller EMA U.
//
// Matrices are row-major (out, in) as in the parameter table. The momentum buffer is
// fp32 like the AdamW moments, so the optimizer's `m` state can hold it. Nothing here
// allocates: callers pass a workspace of muon_workspace_size() reals.
//
// Determinism: the results do not depend on the number of OpenMP threads (each output
// element is computed by one thread with a fixed summation order).
#ifndef HYBRID_MUON_H
#define HYBRID_MUON_H

#include <stddef.h>

#include "base/real.h"

// Quintic Newton-Schulz coefficients (KellerJordan/Muon): chosen to maximise the slope
// at 0, not to converge. Five steps map every singular value σ of the normalised input
// with σ >= 0.0052 into [0.682, 1.134] (tests/test_muon.c derives and checks the band).
#define MUON_NS_A 3.4445
#define MUON_NS_B (-4.7750)
#define MUON_NS_C 2.0315
#define MUON_NS_EPS 1e-7
#define MUON_NS_STEPS 5

// The config's muon_scale. A rule names a whole update: its scale and its momentum form
// (muon_momentum_form): moonlight is Moonlight's Muon, keller is KellerJordan/Muon's.
typedef enum {
    MUON_SCALE_MOONLIGHT,  // 0.2 * sqrt(max(rows, cols)), sum form   (Moonlight, the default)
    MUON_SCALE_KELLER,     // sqrt(max(1, rows / cols)), EMA form     (KellerJordan/Muon, modded-nanogpt)
    MUON_SCALE_NONE,       // 1, sum form                             (tests)
} MuonScaleRule;

// How the momentum buffer M accumulates (equations at the top). A checkpoint's M is in
// one of them; checkpoints/checkpoint.c records which and refuses to resume into the other.
typedef enum {
    MUON_MOMENTUM_SUM,  // M = mu M + g,           U = g + mu M            (Moonlight)
    MUON_MOMENTUM_EMA,  // M = mu M + (1 - mu) g,  U = (1 - mu) g + mu M   (KellerJordan/Muon)
} MuonMomentumForm;

// Hyperparameters that stay fixed over a run (lr, wd and grad_scale are per call).
typedef struct {
    double momentum;          // mu, 0.95
    int nesterov;             // 1: U from g and M as above; 0: U = M
    int ns_steps;             // Newton-Schulz iterations, 5
    MuonScaleRule scale_rule; // MUON_SCALE_MOONLIGHT
    MuonMomentumForm form;    // muon_momentum_form(scale_rule): MUON_MOMENTUM_SUM
} MuonConfig;

// momentum 0.95, Nesterov, 5 steps, the moonlight rule and its sum form. Whoever changes
// scale_rule sets form = muon_momentum_form(scale_rule) too (tests may pair them freely).
void muon_config_default(MuonConfig *mc);
double muon_update_scale(MuonScaleRule rule, int rows, int cols);
// The momentum form of a rule: EMA for keller, sum for moonlight and none.
MuonMomentumForm muon_momentum_form(MuonScaleRule rule);
// "sum" or "ema" (the name checkpoints record).
const char *muon_momentum_form_name(MuonMomentumForm form);

// Reals of workspace newton_schulz5 needs for a (rows, cols) matrix: 3*m*n + 2*m*m
// with m = min(rows, cols), n = max(rows, cols).
size_t newton_schulz_workspace_size(int rows, int cols);

// In place: X (rows, cols) <- NS5(X), approximately U Vᵀ for X = U Σ Vᵀ.
//   X <- X / (||X||_F + 1e-7); tall X (rows > cols) is transposed first so that the
//   Gram matrix is the small (m, m) one, and transposed back at the end;
//   `steps` times: A = X Xᵀ, B = b A + c A², X <- a X + B X.
// Each step maps every singular value σ to a σ + b σ³ + c σ⁵ and keeps the singular
// vectors. A zero matrix stays zero. work: newton_schulz_workspace_size(rows, cols) reals.
void newton_schulz5(real *X, int rows, int cols, int steps, real *work);

// Reals of workspace muon_update_matrix needs for one (rows, cols) matrix:
// rows*cols for U plus newton_schulz_workspace_size(rows, cols).
size_t muon_workspace_size(int rows, int cols);

// One Muon step (equations at the top) on one matrix W (rows, cols), gradient G and
// momentum M (rows*cols fp32, updated in place). wd is the decoupled weight decay
// (0 for none). work: muon_workspace_size(rows, cols) reals.
void muon_update_matrix(real *W, const real *G, float *M, int rows, int cols, const MuonConfig *mc, double lr,
                        double wd, double grad_scale, real *work);

// A fused tensor of `rows` rows that holds n_blocks logical matrices stacked along the
// rows, each (rows / n_blocks, cols): every block gets its own momentum, NS5 and scale,
// exactly as muon_update_matrix on that block. Examples: a fused qkv weight (3C, C) is
// n_blocks = 3; an experts tensor (E, out, in) is rows = E*out, cols = in, n_blocks = E.
// Dies unless n_blocks >= 1 divides rows. work: muon_workspace_size(rows / n_blocks, cols).
void muon_update_blocks(real *W, const real *G, float *M, int rows, int cols, int n_blocks, const MuonConfig *mc,
                        double lr, double wd, double grad_scale, real *work);

// The same with blocks of uneven heights (e.g. q, k, v of different widths under GQA):
// block i has block_rows[i] rows, blocks follow each other in memory. Dies on a
// non-positive height. work: muon_workspace_size(max block_rows, cols).
void muon_update_row_splits(real *W, const real *G, float *M, const int *block_rows, int n_blocks, int cols,
                            const MuonConfig *mc, double lr, double wd, double grad_scale, real *work);

// The backend-table form of muon_update_blocks is cpu_muon_update (optim.h): its scale_rule
// also picks the momentum form (muon_momentum_form). The CPU keeps no master copy, so its
// master argument must be NULL (param is updated in place).

#endif
