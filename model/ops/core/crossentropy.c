// Softmax cross-entropy (docs/hybrid.md, "Cross-entropy"), per row i of logits z (N, Vp) with
// target y = targets[i]; only columns v < V are real tokens:
//   lse = log sum_{v<V} exp(z_v),   loss_i = lse - z_y
//   dz_v = (exp(z_v - lse) - [v == y]) * dloss   for v < V,   0 for V <= v < Vp
// A row with y < 0 is ignored: loss 0 and a zero gradient row. The padding columns are
// never read. Row max and exp-sums in double. This op computes per-row losses; the
// mean over non-ignored rows belongs to the caller (it passes dloss = 1/count).
// The backward may run in place (dlogits == logits): each element is read before it
// is overwritten, and the row's lse is taken before any write. The training graph runs
// both at once (crossentropy_forward_backward): here simply the forward, then the
// backward on the same logits, so the numbers are those of the two ops run apart.
#include <math.h>

#include "model/ops/core/core.h"
#include "base/util.h"

static void check_targets(const char *who, const int *targets, int N, int V, int Vp) {
    if (V <= 0 || V > Vp) die("%s: vocabulary size V = %d must be in 1..Vp (Vp = %d)", who, V, Vp);
    for (int i = 0; i < N; i++)
        if (targets[i] >= V) die("%s: target %d at row %d is out of range (V = %d)", who, targets[i], i, V);
}

// log sum_{v<V} exp(z_v), max-shifted
static double row_lse(const real *z, int V) {
    double m = -INFINITY;
    for (int v = 0; v < V; v++)
        if (z[v] > m) m = z[v];
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp(z[v] - m);
    return m + log(s);
}

void cpu_crossentropy_forward(real *losses, const real *logits, const int *targets, int N, int V, int Vp) {
    check_targets("crossentropy_forward", targets, N, V, Vp);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *z = logits + (size_t)i * Vp;
        int y = targets[i];
        losses[i] = y < 0 ? 0 : (real)(row_lse(z, V) - z[y]);
    }
}

void cpu_crossentropy_backward(real *dlogits, const real *logits, const int *targets, real dloss, int N, int V,
                               int Vp) {
    check_targets("crossentropy_backward", targets, N, V, Vp);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *z = logits + (size_t)i * Vp;
        real *dz = dlogits + (size_t)i * Vp;
        int y = targets[i];
        if (y < 0) {
            for (int v = 0; v < Vp; v++) dz[v] = 0;
            continue;
        }
        double lse = row_lse(z, V), dl = dloss;
        for (int v = 0; v < V; v++) dz[v] = (real)((exp(z[v] - lse) - (v == y ? 1.0 : 0.0)) * dl);
        for (int v = V; v < Vp; v++) dz[v] = 0;
    }
}

// the forward first: with dlogits == logits the backward overwrites what it reads
void cpu_crossentropy_forward_backward(real *losses, real *dlogits, const real *logits, const int *targets, real dloss,
                                       int N, int V, int Vp) {
    cpu_crossentropy_forward(losses, logits, targets, N, V, Vp);
    cpu_crossentropy_backward(dlogits, logits, targets, dloss, N, V, Vp);
}
