// Checkpoint directories (checkpoint.h): save into a hidden temporary folder, rename it
// into place, prune old ones; load with every tensor and key checked.
#define _GNU_SOURCE  // renameat2 (RENAME_EXCHANGE)
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/safetensors.h"
#include "checkpoints/trainer_state.h"
#include "base/kill_point.h"
#include "base/util.h"
#include "model/ops/optim/muon.h"

__attribute__((format(printf, 1, 2))) static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

// Step of a directory named exactly "step_%08d", or -1.
static int parse_step_dir(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || strlen(name) < 13 || strlen(name) > 15) return -1;
    long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > INT_MAX) return -1;
    char canon[32];
    snprintf(canon, sizeof canon, "step_%08d", (int)v);
    return strcmp(canon, name) ? -1 : (int)v;
}

// Steps of the complete checkpoints under root, newest first; *n gets the count.
static int *list_steps(const char *root, int *n) {
    *n = 0;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return NULL;
        die("%s: cannot list (%s)", root, strerror(errno));
    }
    int *steps = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        int s = parse_step_dir(e->d_name);
        if (s < 0) continue;
        char *p = fmt("%s/%s", root, e->d_name);
        int is_dir = dir_exists(p);
        free(p);
        if (!is_dir) continue;
        steps = xrealloc(steps, sizeof(int) * (size_t)(*n + 1));
        steps[(*n)++] = s;
    }
    closedir(d);
    for (int i = 1; i < *n; i++)  // insertion sort, descending
        for (int j = i; j > 0 && steps[j - 1] < steps[j]; j--) {
            int t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return steps;
}

// Index of the first inf or nan of x[0..n), or n.
static size_t first_non_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

// ---- save ----

static void save_config(const char *dir, const char *config_text) {
    char *path = fmt("%s/config.conf", dir);
    write_file_atomic(path, config_text, strlen(config_text));
    free(path);
}

// Writes the table's tensors from each of `bufs` (names prefixed by `prefixes`), plus
// n_meta metadata pairs.
static void save_tensors(const char *path, const ParamTable *t, const float *const *bufs, const char *const *prefixes,
                         int nbufs, const char *const *meta, int n_meta) {
    int n = t->count * nbufs;
    StOut *out = xcalloc((size_t)n, sizeof *out);
    char (*names)[PARAM_NAME_MAX + 8] = xcalloc((size_t)n, sizeof *names);
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < t->count; i++) {
            const ParamInfo *p = &t->items[i];
            StOut *o = &out[b * t->count + i];
            snprintf(names[b * t->count + i], sizeof names[0], "%s%s", prefixes[b], p->name);
            o->name = names[b * t->count + i];
            o->dtype = "F32";
            o->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++) o->shape[d] = p->shape[d];
            o->data = bufs[b] + p->offset;
        }
    st_write(path, out, n, meta, n_meta);
    free(names);
    free(out);
}

// Moves the finished temporary folder to `final`, replacing an older copy of the same step.
static void publish(const char *root, const char *tmp, const char *final, int step) {
    kill_point("checkpoint-write");
    if (dir_exists(final)) {
        // the same step saved again (a resume interrupted before its first step): swap the two
        // folders in one atomic exchange, so step_N is whole at every moment, then delete the
        // old one; a filesystem without the exchange gets two renames through .step_N.old
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            fsync_dir(root);
            remove_tree(tmp);
            return;
        }
        char *old = fmt("%s/.step_%08d.old", root, step);
        if (dir_exists(old)) remove_tree(old);
        if (rename(final, old) != 0) die("%s: cannot move aside to %s (%s)", final, old, strerror(errno));
        if (rename(tmp, final) != 0) die("%s: cannot rename to %s (%s)", tmp, final, strerror(errno));
        fsync_dir(root);
        remove_tree(old);
        free(old);
        return;
    }
    if (rename(tmp, final) != 0) die("%s: cannot rename to %s (%s)", tmp, final, strerror(errno));
    fsync_dir(root);
}

// Removes all but the newest `keep` checkpoints (never `current`), and leftover temporaries.
// A checkpoint is first renamed away (.step_N.del), which is atomic, and only then deleted:
// a kill during the deletion leaves a hidden leftover the next save removes, never a
// half-deleted step_N that looks complete.
static void prune(const char *root, int keep, int current) {
    int n;
    int *steps = list_steps(root, &n);
    for (int i = keep; i < n; i++) {
        if (steps[i] == current) continue;
        char *p = fmt("%s/step_%08d", root, steps[i]), *gone = fmt("%s/.step_%08d.del", root, steps[i]);
        if (dir_exists(gone)) remove_tree(gone);
        if (rename(p, gone) != 0) die("%s: cannot move aside to %s (%s)", p, gone, strerror(errno));
        fsync_dir(root);
        kill_point("checkpoint-prune");
        remove_tree(gone);
        free(p);
        free(gone);
    }
    free(steps);
    DIR *d = opendir(root);
    if (!d) die("%s: cannot list (%s)", root, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        int tmp = len > 5 && e->d_name[0] == '.' && !strncmp(e->d_name + 1, "step_", 5) &&
                  (!strcmp(e->d_name + len - 4, ".tmp") || !strcmp(e->d_name + len - 4, ".old") ||
                   !strcmp(e->d_name + len - 4, ".del"));
        if (!tmp) continue;
        char *p = fmt("%s/%s", root, e->d_name);
        remove_tree(p);
        free(p);
    }
    closedir(d);
}

// Writes the checkpoint's files into the folder `dir`, which exists and is empty.
static void write_contents(const char *dir, const char *config_text, const ParamTable *t, const float *params,
                           const float *m, const float *v, MuonMomentumForm muon_form, const TrainerState *ts) {
    save_config(dir, config_text);
    char *path = fmt("%s/model.safetensors", dir);
    const char *none = "";
    save_tensors(path, t, &params, &none, 1, NULL, 0);
    free(path);
    if (m) {
        const float *bufs[2] = {m, v};
        const char *prefixes[2] = {"m.", "v."};
        // the sum form is recorded by the key's absence, so moonlight files stay as they were
        const char *meta[2] = {CHECKPOINT_MUON_MOMENTUM_KEY, muon_momentum_form_name(MUON_MOMENTUM_EMA)};
        const int ema = muon_form == MUON_MOMENTUM_EMA;
        path = fmt("%s/optimizer.safetensors", dir);
        save_tensors(path, t, bufs, prefixes, 2, meta, ema ? 1 : 0);
        free(path);
    }
    path = fmt("%s/trainer_state.txt", dir);
    trainer_state_write(path, ts);
    free(path);
    fsync_dir(dir);
}

void checkpoint_save(const char *out_dir, const char *config_text, const ParamTable *t, const float *params,
                     const float *m, const float *v, MuonMomentumForm muon_form, const TrainerState *ts, int keep) {
    if (keep < 1) die("checkpoint_save: keep must be at least 1 (got %d)", keep);
    if (!ts || ts->step < 0) die("checkpoint_save: a trainer state with a step >= 0 is required");
    if (!m != !v) die("checkpoint_save: give both optimizer moments m and v, or neither");
    // non-finite weights or optimizer state are never written: the run stops at the last
    // finite checkpoint and says which
    const float *const bufs_all[3] = {params, m, v};
    const char *const what[3] = {"weights", "AdamW/Muon first moment (m)", "AdamW second moment (v)"};
    for (int b = 0; b < 3; b++) {
        if (!bufs_all[b]) continue;
        for (int i = 0; i < t->count; i++) {
            const ParamInfo *p = &t->items[i];
            const size_t bad = first_non_finite(bufs_all[b] + p->offset, p->numel);
            if (bad == p->numel) continue;
            char *last = checkpoint_latest(out_dir);
            die("step %d: tensor '%s' (%s) holds a non-finite value (%g at element %zu); no checkpoint is written. "
                "The last good checkpoint is %s",
                ts->step, p->name, what[b], (double)bufs_all[b][p->offset + bad], bad,
                last ? last : "none (no checkpoint of this run was written)");
        }
    }
    char *root = fmt("%s/checkpoints", out_dir);
    char *tmp = fmt("%s/.step_%08d.tmp", root, ts->step);
    char *final = fmt("%s/step_%08d", root, ts->step);
    mkdir_p(root);
    if (dir_exists(tmp) || file_exists(tmp)) remove_tree(tmp);
    mkdir_p(tmp);
    write_contents(tmp, config_text, t, params, m, v, muon_form, ts);
    publish(root, tmp, final, ts->step);
    prune(root, keep, ts->step);
    free(final);
    free(tmp);
    free(root);
}

void checkpoint_save_weights(const char *dir, const char *config_text, const ParamTable *t, const float *params,
                             const TrainerState *ts) {
    if (dir_exists(dir) || file_exists(dir))
        die("%s: already exists; give a new folder for the checkpoint (nothing was written)", dir);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *tmp = fmt("%.*s.tmp.%ld", (int)n, dir, (long)getpid());
    if (dir_exists(tmp) || file_exists(tmp)) remove_tree(tmp);
    mkdir_p(tmp);
    write_contents(tmp, config_text, t, params, NULL, NULL, MUON_MOMENTUM_SUM, ts);
    if (rename(tmp, dir) != 0) die("%s: cannot rename to %s (%s)", tmp, dir, strerror(errno));
    free(tmp);
}

int checkpoint_has_optimizer(const char *dir) {
    char *path = fmt("%s/optimizer.safetensors", dir);
    const int has = file_exists(path);
    free(path);
    return has;
}

// ---- find and load ----

char *checkpoint_latest(const char *out_dir) {
    char *root = fmt("%s/checkpoints", out_dir);
    int n;
    int *steps = list_steps(root, &n);
    char *best = n ? fmt("%s/step_%08d", root, steps[0]) : NULL;
    free(steps);
    free(root);
    return best;
}

int checkpoint_muon_momentum(const char *dir, MuonMomentumForm *form) {
    char *path = fmt("%s/optimizer.safetensors", dir);
    if (!file_exists(path)) {
        free(path);
        return 0;
    }
    StFile f;
    st_open(&f, path);
    const char *v = st_meta(&f, CHECKPOINT_MUON_MOMENTUM_KEY);
    *form = MUON_MOMENTUM_SUM;  // absent: the sum form
    if (v && !strcmp(v, muon_momentum_form_name(MUON_MOMENTUM_EMA))) *form = MUON_MOMENTUM_EMA;
    else if (v && strcmp(v, muon_momentum_form_name(MUON_MOMENTUM_SUM)))
        die("%s: metadata %s = '%s' is neither 'sum' nor 'ema'", path, CHECKPOINT_MUON_MOMENTUM_KEY, v);
    st_close(&f);
    free(path);
    return 1;
}

static void load_tensors(const StFile *f, const ParamTable *t, const char *prefix, float *dst) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        char name[PARAM_NAME_MAX + 8], want[160], have[160];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        int64_t shape[PARAM_MAX_DIMS];
        for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
        st_shape_str(shape, p->ndim, want, sizeof want);
        const StTensor *s = st_find(f, name);
        if (!s) die("%s: tensor '%s' is missing (the model expects shape %s)", f->path, name, want);
        if (strcmp(s->dtype, "F32")) die("%s: tensor '%s' has dtype %s but the model expects F32", f->path, name, s->dtype);
        int same = s->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = s->shape[d] == p->shape[d];
        if (!same) {
            st_shape_str(s->shape, s->ndim, have, sizeof have);
            die("%s: tensor '%s' has shape %s but the model expects %s", f->path, name, have, want);
        }
        memcpy(dst + p->offset, st_data(f, s), p->numel * sizeof(float));
        const size_t bad = first_non_finite(dst + p->offset, p->numel);
        if (bad < p->numel)
            die("%s: tensor '%s' holds a non-finite value (%g at element %zu): this checkpoint cannot be used", f->path,
                name, (double)dst[p->offset + bad], bad);
    }
}

// A checkpoint's own files carry a checksum (ST_CRC_KEY, verified by st_open); one without
// it was not written by hybrid.c or had its checksum removed, and is not loaded unchecked.
static void require_checksum(const StFile *f) {
    if (!st_meta(f, ST_CRC_KEY))
        die("%s: no %s checksum in the header: not a checkpoint file hybrid.c wrote, or its checksum was removed; "
            "refusing to load it unchecked",
            f->path, ST_CRC_KEY);
}

// Dies on a tensor that is not `<prefix><table name>` for one of the prefixes.
static void check_no_extras(const StFile *f, const ParamTable *t, const char *const *prefixes, int n) {
    for (int i = 0; i < f->count; i++) {
        const char *name = f->tensors[i].name;
        int known = 0;
        for (int k = 0; k < n && !known; k++) {
            size_t len = strlen(prefixes[k]);
            known = !strncmp(name, prefixes[k], len) && params_find(t, name + len) >= 0;
        }
        if (!known)
            die("%s: unexpected tensor '%s': the model has no such parameter (a checkpoint of another config?)",
                f->path, name);
    }
}

void checkpoint_load(const char *dir, const ParamTable *t, float *params, float *m, float *v, TrainerState *ts) {
    if (!m != !v) die("checkpoint_load: give both optimizer moments m and v, or neither");
    StFile f;
    char *path = fmt("%s/model.safetensors", dir);
    st_open(&f, path);
    require_checksum(&f);
    const char *none = "";
    check_no_extras(&f, t, &none, 1);
    load_tensors(&f, t, "", params);
    st_close(&f);
    free(path);
    if (m) {
        path = fmt("%s/optimizer.safetensors", dir);
        if (!file_exists(path)) die("%s: missing: the checkpoint has no optimizer state", path);
        st_open(&f, path);
        require_checksum(&f);
        const char *prefixes[2] = {"m.", "v."};
        check_no_extras(&f, t, prefixes, 2);
        load_tensors(&f, t, "m.", m);
        load_tensors(&f, t, "v.", v);
        st_close(&f);
        free(path);
    }
    if (ts) {
        path = fmt("%s/trainer_state.txt", dir);
        trainer_state_read(path, ts);
        free(path);
    }
}
