// Shape and sequence-offset checks shared by the linear-attention ops.
#include "model/ops/delta_rule/internal.h"
#include "base/util.h"

void lin_check_dims(const LinearDims *d, const char *op) {
    if (d->B < 1 || d->T < 0 || d->H < 1 || d->K < 1 || d->V < 1)
        die("%s: bad dims B=%d T=%d H=%d K=%d V=%d", op, d->B, d->T, d->H, d->K, d->V);
    if (!d->offsets) return;
    if (d->B != 1) die("%s: sequence offsets need B == 1 (got B=%d)", op, d->B);
    if (d->nseq < 1) die("%s: sequence offsets need nseq >= 1 (got %d)", op, d->nseq);
    if (d->offsets[0] != 0 || d->offsets[d->nseq] != d->T)
        die("%s: sequence offsets must start at 0 and end at T=%d (got %d .. %d)", op, d->T, d->offsets[0],
            d->offsets[d->nseq]);
    for (int s = 0; s < d->nseq; s++)
        if (d->offsets[s + 1] < d->offsets[s])
            die("%s: sequence offsets decrease at %d (%d > %d)", op, s, d->offsets[s], d->offsets[s + 1]);
}
