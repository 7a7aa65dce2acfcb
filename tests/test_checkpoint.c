// Checkpoints and the safetensors reader/writer: bit-identical round trips, keep-last-K,
// latest, and every rejection with its message, a Muon momentum of the other form included
// (failing calls run in a forked child whose stderr is captured). The Hugging Face GPT-2
// export: tests/test_hf_export.c.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/config.h"
#include "checkpoints/checkpoint.h"
#include "checkpoints/safetensors.h"
#include "optim/optimizer.h"
#include "train/checkpoint_config.h"
#include "base/util.h"
#include "tests/checkpoint_test_util.h"
#include "tests/testing.h"


static char g_root[256];  // out/test-tmp/checkpoint-<pid>, removed at the end

// ---- helpers ----

static TrainerState state(int step) {
    TrainerState ts = {step, 3, {UINT64_MAX, 12345678901234567890ull, 42}, 0xFEDCBA9876543210ull,
                       1234567890.123456789};
    return ts;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = xfopen(path, "wb");
    xfwrite(buf, 1, n, f, path);
    xfclose(f, path);
}

static void patch_byte(const char *path, long offset, unsigned char value) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, &value, 1, offset) != 1) die("%s: cannot patch", path);
    close(fd);
}

// ---- calls run in the child ----

typedef struct {
    const char *dir, *path;
    const CkModel *M;
    const Config *want;
    int with_optimizer, with_state;
} Call;

static void call_load(void *a) {
    const Call *c = a;
    const ParamTable *t = &c->M->t;
    float *p = xmalloc(sizeof(float) * t->total), *m = NULL, *v = NULL;
    if (c->with_optimizer) {
        m = xmalloc(sizeof(float) * t->total);
        v = xmalloc(sizeof(float) * t->total);
    }
    TrainerState ts;
    checkpoint_load(c->dir, t, p, m, v, c->with_state ? &ts : NULL);
    free(p);
    free(m);
    free(v);
}

static void call_st_open(void *a) {
    StFile f;
    st_open(&f, ((const Call *)a)->path);
    st_close(&f);
}

static void call_check_config(void *a) {
    const Call *c = a;
    checkpoint_check_config(c->dir, c->want);
}

static void call_read_config(void *a) {
    Config c;
    checkpoint_read_config(((const Call *)a)->dir, &c);
}

static void call_check_optimizer(void *a) {
    const Call *c = a;
    checkpoint_check_optimizer(c->dir, c->want);
}

// checkpoint_save with M's config as config.conf and its optimizer's Muon momentum form, as
// the trainer's checkpoint_save_run does
static void save_model(const char *out, const CkModel *M, const float *m, const float *v, const TrainerState *ts,
                       int keep) {
    char *text = config_to_text(&M->c);
    const MuonMomentumForm form =
        M->c.optim.optimizer == OPT_MUON ? muon_momentum_form(optimizer_muon_rule(&M->c.optim)) : MUON_MOMENTUM_SUM;
    checkpoint_save(out, text, &M->t, M->p, m, v, form, ts, keep);
    free(text);
}

// Saves model M as step 1 under g_root/<name>; returns the checkpoint folder (caller frees).
static char *fresh_checkpoint(const CkModel *M, const char *name, int with_optimizer) {
    char *out = path_of(g_root, name);
    TrainerState ts = state(1);
    save_model(out, M, with_optimizer ? M->m : NULL, with_optimizer ? M->v : NULL, &ts, 2);
    char *dir = checkpoint_latest(out);
    free(out);
    return dir;
}

// ---- tests ----

static void test_round_trip(void) {
    CkModel M;
    model_make(&M, NULL);
    char *dir = fresh_checkpoint(&M, "roundtrip", 1);
    CHECK(dir && strstr(dir, "/checkpoints/step_00000001"), "latest is %s", dir ? dir : "NULL");
    const char *files[] = {"config.conf", "model.safetensors", "optimizer.safetensors", "trainer_state.txt"};
    for (int i = 0; i < 4; i++) {
        char *p = path_of(dir, files[i]);
        CHECK(file_exists(p), "%s missing", p);
        free(p);
    }
    size_t bytes = sizeof(float) * M.t.total;
    float *p = xmalloc(bytes), *m = xmalloc(bytes), *v = xmalloc(bytes);
    memset(p, 0xAA, bytes);
    memset(m, 0xAA, bytes);
    memset(v, 0xAA, bytes);
    TrainerState ts, want = state(1);
    memset(&ts, 0, sizeof ts);
    checkpoint_load(dir, &M.t, p, m, v, &ts);
    CHECK(!memcmp(p, M.p, bytes), "params differ after the round trip");
    CHECK(!memcmp(m, M.m, bytes), "m differs after the round trip");
    CHECK(!memcmp(v, M.v, bytes), "v differs after the round trip");
    CHECK(ts.step == want.step && ts.world == want.world, "step %d world %d", ts.step, ts.world);
    CHECK(ts.data.epoch == want.data.epoch && ts.data.shard == want.data.shard && ts.data.sample == want.data.sample,
          "data position differs");
    CHECK(ts.rng == want.rng, "rng %llx", (unsigned long long)ts.rng);
    CHECK(ts.tokens_seen == want.tokens_seen, "tokens_seen %.17g", ts.tokens_seen);
    // weights only
    memset(p, 0, bytes);
    checkpoint_load(dir, &M.t, p, NULL, NULL, NULL);
    CHECK(!memcmp(p, M.p, bytes), "params differ (weights-only load)");
    // the stored config
    Config c;
    checkpoint_read_config(dir, &c);
    CHECK(config_model_mismatch(&c, &M.c) == NULL, "stored config differs in %s", config_model_mismatch(&c, &M.c));
    CHECK(c.model.d_model == 64 && c.model.n_layer == 2 && c.model.padded_vocab_size == 128, "stored config d_model %d", c.model.d_model);
    checkpoint_check_config(dir, &M.c);  // must not die
    // the data sections are CRC-checked, the metadata says "pt"
    char *mpath = path_of(dir, "model.safetensors");
    StFile f;
    st_open(&f, mpath);
    CHECK(f.count == M.t.count, "%d tensors", f.count);
    CHECK(st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "pt"), "format metadata");
    CHECK(st_meta(&f, ST_CRC_KEY) != NULL, "no checksum metadata");
    CHECK((size_t)(f.data - (const unsigned char *)f.map) % 8 == 0, "data section not 8-aligned");
    st_close(&f);
    free(mpath);
    // a weights-only checkpoint has no optimizer file, and asking for one is an error
    char *dir2 = fresh_checkpoint(&M, "weights-only", 0);
    char *opath = path_of(dir2, "optimizer.safetensors");
    CHECK(!file_exists(opath), "weights-only checkpoint has %s", opath);
    Call call = {.dir = dir2, .M = &M, .with_optimizer = 1};
    expect_die("optimizer state missing", call_load, &call, opath, "missing");
    free(opath);
    free(dir2);
    free(p);
    free(m);
    free(v);
    free(dir);
    model_free(&M);
}

static int step_exists(const char *out, int step) {
    char name[64];
    snprintf(name, sizeof name, "checkpoints/step_%08d", step);
    char *p = path_of(out, name);
    int e = dir_exists(p);
    free(p);
    return e;
}

static void test_keep_and_latest(void) {
    CkModel M;
    model_make(&M, NULL);
    char *out = path_of(g_root, "keep");
    CHECK(checkpoint_latest(out) == NULL, "latest of an empty out_dir");
    for (int s = 1; s <= 5; s++) {
        TrainerState ts = state(s);
        save_model(out, &M, M.m, M.v, &ts, 3);
    }
    CHECK(!step_exists(out, 1) && !step_exists(out, 2), "old checkpoints not removed");
    CHECK(step_exists(out, 3) && step_exists(out, 4) && step_exists(out, 5), "kept checkpoints missing");
    // leftovers that are not complete checkpoints: ignored by latest, never deleted unless ours
    const char *junk_dirs[] = {"checkpoints/.step_00000009.tmp", "checkpoints/step_abc", "checkpoints/step_0000001"};
    for (int i = 0; i < 3; i++) {
        char *p = path_of(out, junk_dirs[i]);
        mkdir_p(p);
        free(p);
    }
    char *junk_file = path_of(out, "checkpoints/step_00000010");
    write_bytes(junk_file, "x", 1);
    char *latest = checkpoint_latest(out);
    CHECK(latest && strstr(latest, "checkpoints/step_00000005") && latest[strlen(latest) - 1] == '5', "latest is %s",
          latest ? latest : "NULL");
    free(latest);
    // the next save prunes step 3 and the stale temporary, and leaves foreign names alone
    TrainerState ts = state(6);
    save_model(out, &M, M.m, M.v, &ts, 3);
    CHECK(!step_exists(out, 3) && step_exists(out, 4) && step_exists(out, 6), "keep 3 after step 6");
    char *stale = path_of(out, "checkpoints/.step_00000009.tmp"), *abc = path_of(out, "checkpoints/step_abc");
    CHECK(!dir_exists(stale), "stale temporary not removed");
    CHECK(dir_exists(abc) && file_exists(junk_file), "foreign entries removed");
    free(stale);
    free(abc);
    free(junk_file);
    // saving the same step again replaces it
    M.p[0] += 1.0f;
    save_model(out, &M, M.m, M.v, &ts, 3);
    latest = checkpoint_latest(out);
    float *p = xmalloc(sizeof(float) * M.t.total);
    checkpoint_load(latest, &M.t, p, NULL, NULL, NULL);
    CHECK(p[0] == M.p[0] && latest[strlen(latest) - 1] == '6', "re-saved step 6 not replaced");
    free(p);
    free(latest);
    // an older step saved with keep = 1 keeps the newest and itself
    ts = state(2);
    save_model(out, &M, M.m, M.v, &ts, 1);
    CHECK(step_exists(out, 6) && step_exists(out, 2) && !step_exists(out, 4) && !step_exists(out, 5),
          "keep 1 after saving step 2");
    free(out);
    model_free(&M);
}

// A pruned checkpoint that holds links (to a folder outside the run, to itself, one
// dangling) loses the links only: remove_tree once followed them, deleted the outside
// folder's files and then died on the link (found by test_fuzz.c).
typedef struct {
    const char *out;
    CkModel *M;
} PruneArgs;

static void save_steps_2_and_3(void *arg) {
    const PruneArgs *a = arg;
    for (int s = 2; s <= 3; s++) {
        TrainerState ts = state(s);
        save_model(a->out, a->M, a->M->m, a->M->v, &ts, 2);
    }
}

static void test_prune_links(void) {
    CkModel M;
    model_make(&M, NULL);
    char *out = path_of(g_root, "links"), *outside = path_of(g_root, "outside");
    char *kept = path_of(outside, "keep.txt"), *ck1 = path_of(out, "checkpoints/step_00000001");
    mkdir_p(outside);
    write_bytes(kept, "x", 1);
    TrainerState ts = state(1);
    save_model(out, &M, M.m, M.v, &ts, 2);
    const char *links[][2] = {{"../../../outside", "outside"}, {".", "self"}, {"/nonexistent", "dangling"}};
    for (int i = 0; i < 3; i++) {
        char *p = path_of(ck1, links[i][1]);
        CHECK(symlink(links[i][0], p) == 0, "symlink %s", p);
        free(p);
    }
    char *through = path_of(ck1, "outside/keep.txt");
    CHECK(file_exists(through), "the link does not reach the outside folder");
    free(through);
    char *err;
    PruneArgs a = {out, &M};
    int status = run_forked(save_steps_2_and_3, &a, 60, &err);
    CHECK(status == 0, "saving (and pruning step 1) failed: status %d: %s", status, err);
    free(err);
    CHECK(!step_exists(out, 1) && step_exists(out, 2) && step_exists(out, 3), "step 1 was not pruned");
    CHECK(file_exists(kept), "pruning a checkpoint deleted a file outside it through a link");
    free(ck1);
    free(kept);
    free(outside);
    free(out);
    model_free(&M);
}

static void test_bad_checkpoints(void) {
    CkModel A, B, C;
    const char *narrow[] = {"d_model", "32", NULL}, *shallow[] = {"layers", "A", NULL};
    model_make(&A, NULL);
    model_make(&B, narrow);
    model_make(&C, shallow);
    char want[1024];
    Call call = {.M = &A, .with_optimizer = 1, .with_state = 1};

    char *dir = fresh_checkpoint(&A, "missing-model", 1);
    char *model = path_of(dir, "model.safetensors");
    unlink(model);
    call.dir = dir;
    snprintf(want, sizeof want, "%s: cannot open", model);
    expect_die("missing model.safetensors", call_load, &call, want, NULL);
    free(model);
    free(dir);

    dir = fresh_checkpoint(&A, "truncated", 1);
    model = path_of(dir, "model.safetensors");
    if (truncate(model, file_size(model) - 100) != 0) die("truncate failed");
    call.dir = dir;
    snprintf(want, sizeof want, "%s: file is truncated", model);
    expect_die("truncated model.safetensors", call_load, &call, want, "norm_f.bias");
    free(model);
    free(dir);

    dir = fresh_checkpoint(&A, "flipped", 1);
    model = path_of(dir, "model.safetensors");
    patch_byte(model, file_size(model) - 5, 0x5A);
    call.dir = dir;
    snprintf(want, sizeof want, "%s: checksum mismatch", model);
    expect_die("flipped data byte", call_load, &call, want, NULL);
    free(model);
    free(dir);

    dir = fresh_checkpoint(&A, "flipped-opt", 1);
    char *opt = path_of(dir, "optimizer.safetensors");
    patch_byte(opt, file_size(opt) / 2, 0x00);
    patch_byte(opt, file_size(opt) / 2 + 1, 0xFF);
    call.dir = dir;
    snprintf(want, sizeof want, "%s: checksum mismatch", opt);
    expect_die("flipped optimizer byte", call_load, &call, want, NULL);
    free(opt);
    free(dir);

    dir = fresh_checkpoint(&A, "bad-json", 1);
    model = path_of(dir, "model.safetensors");
    patch_byte(model, 8, '[');
    call.dir = dir;
    snprintf(want, sizeof want, "%s: bad safetensors header: expected '{'", model);
    expect_die("corrupt JSON header", call_load, &call, want, NULL);
    patch_byte(model, 8, '{');
    patch_byte(model, 9, 'x');  // the first name loses its opening quote
    snprintf(want, sizeof want, "%s: bad safetensors header: expected a string", model);
    expect_die("corrupt JSON header (name)", call_load, &call, want, NULL);
    free(model);
    free(dir);

    dir = fresh_checkpoint(&A, "long-header", 1);
    model = path_of(dir, "model.safetensors");
    patch_byte(model, 3, 0x01);  // header length += 16 MiB
    call.dir = dir;
    snprintf(want, sizeof want, "%s: bad safetensors header: header length", model);
    expect_die("header length larger than the file", call_load, &call, want, "is larger than the file");
    free(model);
    free(dir);

    dir = fresh_checkpoint(&B, "wrong-shape", 1);
    call.dir = dir;
    snprintf(want, sizeof want,
             "%s/model.safetensors: tensor 'embed.tok.weight' has shape (128, 32) but the model expects (128, 64)", dir);
    expect_die("wrong shape", call_load, &call, want, NULL);
    free(dir);

    dir = fresh_checkpoint(&C, "missing-tensor", 1);
    call.dir = dir;
    snprintf(want, sizeof want, "%s/model.safetensors: tensor 'blocks.1.norm1.weight' is missing", dir);
    expect_die("missing tensor", call_load, &call, want, "(64)");
    free(dir);

    dir = fresh_checkpoint(&A, "extra-tensor", 1);
    call.dir = dir;
    call.M = &C;
    snprintf(want, sizeof want, "%s/model.safetensors: unexpected tensor 'blocks.1.norm1.weight'", dir);
    expect_die("unexpected tensor", call_load, &call, want, NULL);
    call.M = &A;
    free(dir);

    dir = fresh_checkpoint(&A, "dtype", 1);  // embed.pos.weight rewritten as BF16
    model = path_of(dir, "model.safetensors");
    StOut *out = xcalloc((size_t)A.t.count, sizeof *out);
    for (int i = 0; i < A.t.count; i++) {
        const ParamInfo *pi = &A.t.items[i];
        out[i] = (StOut){pi->name, i == A.mp.pos_embed ? "BF16" : "F32", pi->ndim, {0}, A.p + pi->offset};
        for (int d = 0; d < pi->ndim; d++) out[i].shape[d] = pi->shape[d];
    }
    st_write(model, out, A.t.count, NULL, 0);
    free(out);
    call.dir = dir;
    snprintf(want, sizeof want, "%s: tensor 'embed.pos.weight' has dtype BF16 but the model expects F32", model);
    expect_die("wrong dtype", call_load, &call, want, NULL);
    free(model);
    free(dir);

    dir = fresh_checkpoint(&A, "config", 1);
    Config other = A.c;
    config_set_override(&other, "n_head", "8");
    call.dir = dir;
    call.want = &other;
    snprintf(want, sizeof want, "%s/config.conf: checkpoint has n_head = 4 but the config says 8", dir);
    expect_die("config mismatch", call_check_config, &call, want, NULL);
    // a config.conf that sizes a model far past its weights is refused before sample or
    // export allocate it (it used to end in "out of memory allocating 10^14 bytes")
    Config wide = A.c;
    config_set_override(&wide, "d_model", "1000000");
    char *conf = path_of(dir, "config.conf"), *text = config_to_text(&wide);
    write_bytes(conf, text, strlen(text));
    snprintf(want, sizeof want, "%s: describes", conf);
    expect_die("config.conf far past the weights", call_read_config, &call, want,
               "model.safetensors has");
    free(text);
    text = config_to_text(&A.c);
    write_bytes(conf, text, strlen(text));
    free(text);
    free(conf);

    char *state_path = path_of(dir, "trainer_state.txt");
    const char *states[][3] = {
        {"step = 1\nworld = 3\ndata_epoch = 0\ndata_shard = 0\ndata_sample = 0\ntokens_seen = 5\n", ": missing key 'rng'", "missing trainer_state key"},
        {"step = -3\n", ":1: step = '-3' is not a non-negative integer", "negative step"},
        {"step = 1\nworld = 0\n", ":2: world = '0' is out of range", "world 0"},
        {"step = 1\nlr = 3\n", ":2: unknown key 'lr'", "unknown trainer_state key"},
        {"rng = 1\nrng = 2\n", ":2: key 'rng' given twice", "repeated trainer_state key"},
        {"rng = 18446744073709551616\n", ":1: rng = '18446744073709551616' is not a non-negative integer", "rng overflow"},
        {"tokens_seen = nan\n", ":1: tokens_seen = 'nan' is not a finite number", "tokens_seen nan"},
    };
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        write_bytes(state_path, states[i][0], strlen(states[i][0]));
        snprintf(want, sizeof want, "%s%s", state_path, states[i][1]);
        expect_die(states[i][2], call_load, &call, want, NULL);
    }
    unlink(state_path);
    snprintf(want, sizeof want, "%s: cannot read", state_path);
    expect_die("missing trainer_state.txt", call_load, &call, want, NULL);
    free(state_path);
    free(dir);

    model_free(&A);
    model_free(&B);
    model_free(&C);
}

// ---- non-finite values and a removed checksum ----

typedef struct {
    const char *out;
    const CkModel *M;
    const float *p, *m, *v;
    int step;
} SaveCall;

static void call_save(void *a) {
    const SaveCall *c = a;
    char *text = config_to_text(&c->M->c);
    TrainerState ts = state(c->step);
    checkpoint_save(c->out, text, &c->M->t, c->p, c->m, c->v, MUON_MOMENTUM_SUM, &ts, 2);
    free(text);
}

// Byte offset of `needle` in the first `limit` bytes of the file (the safetensors header), or -1.
static long find_in_file(const char *path, const char *needle, size_t limit) {
    size_t n;
    char *buf = read_file(path, &n);
    if (n > limit) n = limit;
    long at = -1;
    for (size_t i = 0; i + strlen(needle) <= n && at < 0; i++)
        if (!memcmp(buf + i, needle, strlen(needle))) at = (long)i;
    free(buf);
    return at;
}

static void test_non_finite(void) {
    CkModel A;
    model_make(&A, NULL);
    const size_t n = A.t.total;
    float *bad = xmalloc(sizeof(float) * n);
    const float values[3] = {NAN, INFINITY, -INFINITY};
    const char *names[3] = {"weights", "first moment", "second moment"};
    char want[1024];
    char *out = path_of(g_root, "non-finite");
    char *dir = fresh_checkpoint(&A, "non-finite", 1);  // the last good checkpoint: step 1
    const ParamInfo *pi = &A.t.items[A.t.count - 1];
    for (int which = 0; which < 3; which++) {  // the weights, m and v in turn
        const float *src = which == 0 ? A.p : which == 1 ? A.m : A.v;
        memcpy(bad, src, sizeof(float) * n);
        bad[pi->offset + 3] = values[which];
        SaveCall c = {out, &A, which == 0 ? bad : A.p, which == 1 ? bad : A.m, which == 2 ? bad : A.v, 2};
        snprintf(want, sizeof want, "step 2: tensor '%s' (", pi->name);
        char what[64];
        snprintf(what, sizeof what, "non-finite save (%s)", names[which]);
        expect_die(what, call_save, &c, want, "The last good checkpoint is");
        expect_die(what, call_save, &c, dir, "no checkpoint is written");
        CHECK(!step_exists(out, 2), "%s: no step 2 checkpoint may appear", what);
    }
    SaveCall first = {path_of(g_root, "non-finite-first"), &A, bad, A.m, A.v, 1};
    expect_die("non-finite save with no earlier checkpoint", call_save, &first,
               "The last good checkpoint is none (no checkpoint of this run was written)", NULL);
    free((char *)first.out);

    // a non-finite value in a file whose checksum matches (written by another tool) is refused at load
    char *model = path_of(dir, "model.safetensors");
    StOut *so = xcalloc((size_t)A.t.count, sizeof *so);
    memcpy(bad, A.p, sizeof(float) * n);
    bad[pi->offset] = INFINITY;
    for (int i = 0; i < A.t.count; i++) {
        const ParamInfo *q = &A.t.items[i];
        so[i] = (StOut){q->name, "F32", q->ndim, {0}, bad + q->offset};
        for (int d = 0; d < q->ndim; d++) so[i].shape[d] = q->shape[d];
    }
    st_write(model, so, A.t.count, NULL, 0);
    free(so);
    Call call = {.dir = dir, .M = &A, .with_optimizer = 1, .with_state = 1};
    snprintf(want, sizeof want, "%s: tensor '%s' holds a non-finite value (inf at element 0)", model, pi->name);
    expect_die("non-finite load", call_load, &call, want, "cannot be used");
    free(model);
    free(dir);

    // a checkpoint whose checksum entry was renamed away loads only checked
    const char *files[2] = {"model.safetensors", "optimizer.safetensors"};
    for (int f = 0; f < 2; f++) {
        char *fresh = fresh_checkpoint(&A, f ? "no-crc-optimizer" : "no-crc-model", 1);
        char *path = path_of(fresh, files[f]);
        long at = find_in_file(path, "\"" ST_CRC_KEY "\"", 1 << 20);
        CHECK(at > 0, "%s: the checksum key is in the header", path);
        if (at > 0) patch_byte(path, at + 1, 'X');  // "Xybrid.crc32": an unknown metadata key
        call.dir = fresh;
        snprintf(want, sizeof want, "%s: no %s checksum in the header", path, ST_CRC_KEY);
        expect_die("checksum entry removed", call_load, &call, want, "refusing to load it unchecked");
        free(path);
        free(fresh);
    }
    free(out);
    free(bad);
    model_free(&A);
}

// ---- the Muon momentum form (checkpoint.h) ----

// Rewrites <dir>/optimizer.safetensors with the same tensors and the metadata pairs `meta`
// (n_meta of them): n_meta = 0 gives the file a muon_scale = keller run wrote before keller
// took the EMA form.
static void rewrite_optimizer_meta(const char *dir, const char *const *meta, int n_meta) {
    char *path = path_of(dir, "optimizer.safetensors");
    StFile f;
    st_open(&f, path);
    StOut *out = xcalloc((size_t)f.count, sizeof *out);
    for (int i = 0; i < f.count; i++) {
        const StTensor *t = &f.tensors[i];
        out[i] = (StOut){t->name, t->dtype, t->ndim, {0}, st_data(&f, t)};
        for (int d = 0; d < t->ndim; d++) out[i].shape[d] = t->shape[d];
    }
    st_write(path, out, f.count, meta, n_meta);  // a new file renamed over the mapped one
    free(out);
    st_close(&f);
    free(path);
}

// The metadata value of <dir>/optimizer.safetensors (copied into buf; "" if absent).
static const char *optimizer_meta(const char *dir, char *buf, size_t size) {
    char *path = path_of(dir, "optimizer.safetensors");
    StFile f;
    st_open(&f, path);
    const char *v = st_meta(&f, CHECKPOINT_MUON_MOMENTUM_KEY);
    snprintf(buf, size, "%s", v ? v : "");
    st_close(&f);
    free(path);
    return buf;
}

static void test_muon_momentum_form(void) {
    const char *adamw_kv[] = {"optimizer", "adamw", NULL};
    const char *moon_kv[] = {"optimizer", "muon", "muon_scale", "moonlight", NULL};
    const char *keller_kv[] = {"optimizer", "muon", "muon_scale", "keller", NULL};
    CkModel A, Mo, K;
    model_make(&A, adamw_kv);
    model_make(&Mo, moon_kv);
    model_make(&K, keller_kv);
    char *da = fresh_checkpoint(&A, "form-adamw", 1), *dm = fresh_checkpoint(&Mo, "form-moonlight", 1);
    char *dk = fresh_checkpoint(&K, "form-keller", 1), *dold = fresh_checkpoint(&K, "form-old-keller", 1);
    char buf[64];
    // what is recorded: "ema" for keller only; moonlight and AdamW files carry no key (as before)
    CHECK(!strcmp(optimizer_meta(dk, buf, sizeof buf), "ema"), "keller checkpoint: %s = '%s'",
          CHECKPOINT_MUON_MOMENTUM_KEY, buf);
    CHECK(!strcmp(optimizer_meta(dm, buf, sizeof buf), ""), "moonlight checkpoint has %s = '%s'",
          CHECKPOINT_MUON_MOMENTUM_KEY, buf);
    CHECK(!strcmp(optimizer_meta(da, buf, sizeof buf), ""), "AdamW checkpoint has %s = '%s'",
          CHECKPOINT_MUON_MOMENTUM_KEY, buf);
    // the keller checkpoint's moments round-trip (the key changes nothing else)
    size_t bytes = sizeof(float) * K.t.total;
    float *p = xmalloc(bytes), *m = xmalloc(bytes), *v = xmalloc(bytes);
    checkpoint_load(dk, &K.t, p, m, v, NULL);
    CHECK(!memcmp(m, K.m, bytes) && !memcmp(v, K.v, bytes), "keller checkpoint: moments differ after the round trip");
    free(p);
    free(m);
    free(v);
    // a keller checkpoint from before the EMA form: no key
    rewrite_optimizer_meta(dold, NULL, 0);
    CHECK(!strcmp(optimizer_meta(dold, buf, sizeof buf), ""), "old keller file still has '%s'", buf);

    // resumes that keep the form, or involve AdamW, pass (each call must not die)
    checkpoint_check_optimizer(dk, &K.c);
    checkpoint_check_optimizer(dm, &Mo.c);
    checkpoint_check_optimizer(dold, &Mo.c);  // both sum form
    checkpoint_check_optimizer(da, &K.c);
    checkpoint_check_optimizer(da, &Mo.c);
    checkpoint_check_optimizer(dk, &A.c);
    checkpoint_check_optimizer(dm, &A.c);
    checkpoint_check_optimizer(dold, &A.c);
    checkpoint_check_config(dold, &K.c);  // the shapes agree: only the momentum form is refused

    // refused, naming the file and the problem: an old keller checkpoint resumed by keller,
    // and switching rules across forms, both ways
    const struct {
        const char *what, *dir;
        const Config *want;
        const char *msg, *also;
    } refused[] = {
        {"old keller checkpoint resumed by keller", dold, &K.c,
         "written by a muon_scale = keller run before keller took KellerJordan/Muon's EMA momentum (no "
         CHECKPOINT_MUON_MOMENTUM_KEY " = ema metadata): its Muon momentum is in the sum form M = mu M + g, and this "
         "run (muon_scale = keller) keeps the ema form M = mu M + (1 - mu) g",
         "would mix the two forms"},
        {"moonlight checkpoint resumed by keller", dm, &K.c,
         "its Muon momentum is in the sum form M = mu M + g (muon_scale = moonlight) but this run (muon_scale = "
         "keller) keeps the ema form",
         "Resume with muon_scale = moonlight"},
        {"keller checkpoint resumed by moonlight", dk, &Mo.c,
         "its Muon momentum is in the ema form M = mu M + (1 - mu) g (muon_scale = keller) but this run (muon_scale "
         "= moonlight) keeps the sum form",
         "Resume with muon_scale = keller"},
    };
    char want[1024];
    Call call;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        call = (Call){.dir = refused[i].dir, .want = refused[i].want};
        snprintf(want, sizeof want, "%s/optimizer.safetensors: %s", refused[i].dir, refused[i].msg);
        expect_die(refused[i].what, call_check_optimizer, &call, want, refused[i].also);
    }
    // a value we never write
    const char *bogus[] = {CHECKPOINT_MUON_MOMENTUM_KEY, "lerp"};
    rewrite_optimizer_meta(dk, bogus, 1);
    call = (Call){.dir = dk, .want = &K.c};
    snprintf(want, sizeof want,
             "%s/optimizer.safetensors: metadata " CHECKPOINT_MUON_MOMENTUM_KEY " = 'lerp' is neither 'sum' nor 'ema'",
             dk);
    expect_die("unknown momentum form", call_check_optimizer, &call, want, NULL);
    printf("muon momentum form: keller checkpoints record 'ema', moonlight/AdamW none; mixed forms refused\n");
    free(da);
    free(dm);
    free(dk);
    free(dold);
    model_free(&A);
    model_free(&Mo);
    model_free(&K);
}

// ---- the reader on hand-made files ----

static void write_st(const char *path, const char *json, size_t data_len) {
    size_t n = strlen(json);
    unsigned char *buf = xcalloc(1, 8 + n + data_len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

static void test_reader_strictness(void) {
    char *path = path_of(g_root, "hand.safetensors");
    write_st(path, "{\"a\\u0041\\n\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                   "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[8,10]},"
                   "\"__metadata__\": {\"k\": \"v\\\"\"}}   ", 10);
    StFile f;
    st_open(&f, path);
    const StTensor *t = st_find(&f, "aA\n");
    CHECK(f.count == 2 && t && t->ndim == 1 && t->shape[0] == 2 && t->numel == 2, "hand-made file parsed wrong");
    CHECK(st_find(&f, "s") && st_find(&f, "s")->numel == 1 && st_find(&f, "s")->elem_size == 2, "scalar BF16");
    CHECK(st_meta(&f, "k") && !strcmp(st_meta(&f, "k"), "v\""), "metadata value");
    st_close(&f);

    const struct { const char *json; size_t data; const char *want; } bad[] = {
        {"{\"a:{}", 0, "unterminated string"},
        {"{\"a\":{\"dtype\":\"F32\" \"shape\":[2],\"data_offsets\":[0,8]}}", 8, "expected ','"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}x", 8, "after the closing '}'"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a': unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "expected a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "expected an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a' lacks 'data_offsets'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown field 'x'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
         "tensor 'a': data_offsets [0, 8] hold 8 bytes but dtype F32 and shape (3) need 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "tensors 'a' and 'b' overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "4 bytes before tensor 'b' belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "tensor 'a' appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "4 bytes after the last tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 6, "file is truncated"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ values must be strings"},
        {"{\"__metadata__\":{\"hybrid.crc32\":\"xyz\"}}", 0, "is not 8 hex digits"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},", 8, "expected a string"},
        {"{\"a\\x\":{}}", 0, "bad escape"},
        {"{\"a\\ud800\":{}}", 0, "unpaired surrogate"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero"},
    };
    char want[1024];
    Call call = {.path = path};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_st(path, bad[i].json, bad[i].data);
        snprintf(want, sizeof want, "%s: ", path);
        expect_die(bad[i].json, call_st_open, &call, want, bad[i].want);
    }
    write_bytes(path, "abc", 3);
    snprintf(want, sizeof want, "%s: bad safetensors header: the file has 3 bytes", path);
    expect_die("3-byte file", call_st_open, &call, want, NULL);
    write_bytes(path, "\0\0\0\0\0\0\0\0", 8);
    snprintf(want, sizeof want, "%s: bad safetensors header: implausible header length 0", path);
    expect_die("empty header", call_st_open, &call, want, NULL);
    free(path);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "out/test-tmp/checkpoint-%ld", (long)getpid());
    mkdir_p(g_root);
    test_round_trip();
    test_keep_and_latest();
    test_prune_links();
    test_bad_checkpoints();
    test_non_finite();
    test_muon_momentum_form();
    test_reader_strictness();
    remove_tree(g_root);
    TEST_MAIN_END();
}
