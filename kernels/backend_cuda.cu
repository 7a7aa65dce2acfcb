// The CUDA backend table (model/backend.h): device state, memory, host <-> device
// conversion (fp32 <-> bf16, round to nearest even), per-op timing, and the table that
// points at the ops of the other files in this folder.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "base/bf16.h"
#include "kernels/common.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/moe/experts_cublas.h"

CudaState g_cuda;

void cuda_fail(const char *what, const char *err, const char *file, int line) {
    fprintf(stderr, "hybrid: error: CUDA: %s:%d: %s failed: %s\n", file, line, what, err);
    fflush(stderr);
    exit(1);
}

void cuda_launch_check(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) cuda_fail("kernel launch", cudaGetErrorString(e), file, line);
    if (g_cuda.sync_debug) {
        e = cudaStreamSynchronize(g_cuda.stream);
        if (e != cudaSuccess) cuda_fail("kernel execution", cudaGetErrorString(e), file, line);
    }
}

#ifndef HYBRID_CUDA_EMU  // (the emulator runs any launch: it has no register file to exceed)
void cuda_launch_refused(const void *kernel, cudaError_t err, unsigned block, size_t smem) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess)
        die("CUDA: kernel launch failed: %s (block %u threads, %zu B dynamic shared memory)", cudaGetErrorString(err),
            block, smem);
    die("CUDA: kernel launch failed: %s: the launch asked for %u threads a block and %zu B of dynamic shared "
        "memory; the kernel allows at most %d threads a block (%d registers a thread, %zu B static and at most %d B "
        "dynamic shared memory)",
        cudaGetErrorString(err), block, smem, a.maxThreadsPerBlock, a.numRegs, a.sharedSizeBytes,
        a.maxDynamicSharedSizeBytes);
}
#endif

// An on/off implementation switch from the environment: unset, empty or "0" is off, "1" is on;
// any other value stops the run naming the variable (a typo must not silently pick a path)
int env_flag(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (strcmp(v, "1")) die("%s=%s: expected 0 (off) or 1 (on)", name, v);
    return 1;
}

// An implementation choice from the environment among n named values: unset or empty gives 0
// (values[0], the default), values[i] gives i; any other value stops the run naming the variable
// and the values it takes (a typo must not silently pick the default)
int env_choice(const char *name, const char *const *values, int n) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, values[i])) return i;
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s%s", i ? ", " : "", values[i],
                 i ? "" : " (the default)");
    die("%s=%s: expected one of %s", name, v, list);
}

void cuda_init(void) {
    if (g_cuda.ready) return;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1)
        die("--device cuda: no usable CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    CUDA_CHECK(cudaGetDevice(&g_cuda.device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g_cuda.device));
    if (prop.major < 8)
        die("--device cuda: %s has compute capability %d.%d; this backend needs bf16 tensor cores (8.0 or newer)",
            prop.name, prop.major, prop.minor);
    g_cuda.sm_count = prop.multiProcessorCount;
    g_cuda.cc = prop.major * 10 + prop.minor;
    g_cuda.sync_debug = env_flag("HYBRID_CUDA_SYNC");
    CUDA_CHECK(cudaStreamCreateWithFlags(&g_cuda.stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasLtCreate(&g_cuda.lt));
    g_cuda.lt_workspace_size = 32u << 20;
    CUDA_CHECK(cudaMalloc(&g_cuda.lt_workspace, g_cuda.lt_workspace_size));
    g_cuda.scratch_size = 16u << 20;
    CUDA_CHECK(cudaMalloc(&g_cuda.scratch, g_cuda.scratch_size));
    g_cuda.ready = 1;
}

#ifdef HYBRID_CUDA_EMU
extern "C" void cuda_emu_set_cc(int cc) {
    cuda_init();
    g_cuda.cc = cc;
}
#endif

void cuda_allow_dynamic_smem(const void *kernel, size_t bytes) {
    static struct {
        const void *kernel;
        size_t bytes;
    } set[256];
    static int nset;
    for (int i = 0; i < nset; i++)
        if (set[i].kernel == kernel) {
            if (set[i].bytes >= bytes) return;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
            set[i].bytes = bytes;
            return;
        }
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (nset < 256) set[nset].kernel = kernel, set[nset].bytes = bytes, nset++;  // (a full table: set every time)
}

void *scratch_get(size_t bytes) {
    if (bytes > g_cuda.scratch_size) {
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
        CUDA_CHECK(cudaFree(g_cuda.scratch));
        size_t size = g_cuda.scratch_size;
        while (size < bytes) size *= 2;
        CUDA_CHECK(cudaMalloc(&g_cuda.scratch, size));
        g_cuda.scratch_size = size;
    }
#ifdef HYBRID_CUDA_EMU
    // the emulator hands scratch out NaN-filled on every call: an op that reads scratch it did
    // not write (or counts on what an earlier op left there) shows it (docs/cuda.md, "The CPU emulator")
    CUDA_CHECK(cudaMemset(g_cuda.scratch, 0xff, bytes));
#endif
    return g_cuda.scratch;
}

// ---------------------------------------------------------------------------
// per-op timing: events around each op, read at report time

#define PROF_MAX_NAMES 256  // (the kernels name 86 ops and parts; + the GEMM shapes under _SHAPES)
static struct {
    int on, checked;
    const char *names[PROF_MAX_NAMES];
    double ms[PROF_MAX_NAMES];
    long calls[PROF_MAX_NAMES];
    std::vector<cudaEvent_t> pool;
    std::vector<std::pair<int, size_t>> recs;  // per finished scope: name slot, first event index
    size_t used;                               // events handed out from the pool (2 per scope)
} g_prof;

static int prof_on(void) {
    if (!g_prof.checked) {
        g_prof.on = env_flag("HYBRID_CUDA_PROFILE");
        g_prof.checked = 1;
    }
    return g_prof.on;
}

// HYBRID_CUDA_PROFILE_SHAPES=1 (with HYBRID_CUDA_PROFILE=1): the GEMM ops also time each
// shape as a part, "matmul_bwd/65536x768>6" (N rows, C in, OC out), so a profile tells
// which projections of a model are slow. The names are made at run time, so they are kept
// here (ProfScope keeps only the pointer).
extern "C" const char *prof_shape_name(const char *op, int N, int C, int OC) {
    static int checked, on;
    static std::vector<char *> names;
    if (!prof_on()) return NULL;
    if (!checked) {
        on = env_flag("HYBRID_CUDA_PROFILE_SHAPES");
        checked = 1;
    }
    if (!on) return NULL;
    char buf[96];
    snprintf(buf, sizeof buf, "%s/%dx%d>%d", op, N, C, OC);
    for (size_t i = 0; i < names.size(); i++)
        if (!strcmp(names[i], buf)) return names[i];
    char *copy = strdup(buf);
    if (!copy) die("prof_shape_name: out of memory");
    names.push_back(copy);
    return copy;
}

static cudaEvent_t prof_event(size_t i) {
    while (g_prof.pool.size() <= i) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        g_prof.pool.push_back(e);
    }
    return g_prof.pool[i];
}

ProfScope::ProfScope(const char *name) : slot(-1), first(0) {
    if (!name || !prof_on()) return;
    int s = 0;
    while (s < PROF_MAX_NAMES && g_prof.names[s] && strcmp(g_prof.names[s], name)) s++;
    if (s == PROF_MAX_NAMES) return;
    g_prof.names[s] = name;
    slot = s;
    first = g_prof.used;
    g_prof.used += 2;
    CUDA_CHECK(cudaEventRecord(prof_event(first), g_cuda.stream));
}

ProfScope::~ProfScope() {
    if (slot < 0) return;
    CUDA_CHECK(cudaEventRecord(prof_event(first + 1), g_cuda.stream));
    g_prof.recs.push_back(std::make_pair(slot, first));
}

// Folds the recorded event pairs into the per-op totals (synchronizes).
static void prof_collect(void) {
    if (!g_prof.used) return;
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    for (size_t r = 0; r < g_prof.recs.size(); r++) {
        float ms = 0;
        size_t e = g_prof.recs[r].second;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_prof.pool[e], g_prof.pool[e + 1]));
        g_prof.ms[g_prof.recs[r].first] += ms;
        g_prof.calls[g_prof.recs[r].first]++;
    }
    g_prof.recs.clear();
    g_prof.used = 0;
}

extern "C" int cuda_profile_enabled(void) { return prof_on(); }

extern "C" void cuda_profile_set(int on) {
    prof_on();
    if (g_prof.on && !on) prof_collect();  // the scopes recorded so far still count
    g_prof.on = on != 0;
}

extern "C" int cuda_profile_read(const char **names, double *ms, long *calls, int max) {
    prof_collect();
    int n = 0;
    for (int s = 0; s < PROF_MAX_NAMES && g_prof.names[s] && n < max; s++) {
        if (!g_prof.calls[s]) continue;
        names[n] = g_prof.names[s];
        ms[n] = g_prof.ms[s];
        calls[n] = g_prof.calls[s];
        n++;
    }
    return n;
}

extern "C" void cuda_profile_reset(void) {
    prof_collect();
    for (int s = 0; s < PROF_MAX_NAMES; s++) {
        g_prof.ms[s] = 0;
        g_prof.calls[s] = 0;
    }
}

extern "C" void cuda_profile_print(FILE *f, int steps) {
    prof_collect();
    // A name with a '/' is a part of an op (a kernel inside it, e.g. "delta_chunk/walk"): printed
    // with the rest, left out of the total, which its op already holds.
    double total = 0;
    for (int s = 0; s < PROF_MAX_NAMES && g_prof.names[s]; s++)
        if (!strchr(g_prof.names[s], '/')) total += g_prof.ms[s];
    if (steps < 1) steps = 1;
    fprintf(f, "%-28s %10s %8s %7s\n", "op (per step)", "ms", "calls", "share");
    // largest first
    int order[PROF_MAX_NAMES], n = 0;
    for (int s = 0; s < PROF_MAX_NAMES && g_prof.names[s]; s++) order[n++] = s;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && g_prof.ms[order[j - 1]] < g_prof.ms[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        int s = order[i];
        if (!g_prof.calls[s]) continue;
        fprintf(f, "%-28s %10.3f %8.1f %6.1f%%\n", g_prof.names[s], g_prof.ms[s] / steps,
                (double)g_prof.calls[s] / steps, total > 0 ? 100.0 * g_prof.ms[s] / total : 0.0);
    }
    fprintf(f, "%-28s %10.3f\n", "total (ops, back to back)", total / steps);
}

extern "C" void cuda_memory_stats(size_t *live, size_t *peak, size_t *device_used, size_t *device_total) {
    cuda_init();
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (live) *live = g_cuda.live_bytes;
    if (peak) *peak = g_cuda.peak_bytes;
    if (device_used) *device_used = total_b - free_b;
    if (device_total) *device_total = total_b;
}

// ---------------------------------------------------------------------------
// memory

// sizes of live allocations, for the live/peak byte counts
static std::vector<std::pair<void *, size_t>> g_allocs;

static void *cu_alloc(size_t bytes) {
    cuda_init();
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    CUDA_CHECK(cudaMalloc(&p, n));
    CUDA_CHECK(cudaMemsetAsync(p, 0, n, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    g_allocs.push_back(std::make_pair(p, n));
    g_cuda.live_bytes += n;
    if (g_cuda.live_bytes > g_cuda.peak_bytes) g_cuda.peak_bytes = g_cuda.live_bytes;
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaFree(p));
    for (size_t i = 0; i < g_allocs.size(); i++)
        if (g_allocs[i].first == p) {
            g_cuda.live_bytes -= g_allocs[i].second;
            moe_cublas_forget(p, g_allocs[i].second);  // (the MoE GEMMs' host copies of offsets in it)
            g_allocs[i] = g_allocs.back();
            g_allocs.pop_back();
            break;
        }
}

static void cu_zero(real *p, size_t n) {
    ce_lse_invalidate(p, n * sizeof(bf16));
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(bf16), g_cuda.stream));
}

#define XFER_CHUNK ((size_t)1 << 22)  // elements per host staging chunk

static void cu_upload(real *dst, const float *src, size_t n) {
    ce_lse_invalidate(dst, n * sizeof(bf16));
    uint16_t *tmp = (uint16_t *)xmalloc(sizeof(uint16_t) * (n < XFER_CHUNK ? n + 1 : XFER_CHUNK));
    char *d = (char *)dst;
    for (size_t at = 0; at < n; at += XFER_CHUNK) {
        size_t len = n - at < XFER_CHUNK ? n - at : XFER_CHUNK;
        for (size_t i = 0; i < len; i++) tmp[i] = bf16_from_float(src[at + i]);
        CUDA_CHECK(cudaMemcpyAsync(d + at * sizeof(bf16), tmp, len * sizeof(bf16), cudaMemcpyHostToDevice,
                                   g_cuda.stream));
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    }
    free(tmp);
}

static void cu_download(float *dst, const real *src, size_t n) {
    uint16_t *tmp = (uint16_t *)xmalloc(sizeof(uint16_t) * (n < XFER_CHUNK ? n + 1 : XFER_CHUNK));
    const char *s = (const char *)src;
    for (size_t at = 0; at < n; at += XFER_CHUNK) {
        size_t len = n - at < XFER_CHUNK ? n - at : XFER_CHUNK;
        CUDA_CHECK(cudaMemcpyAsync(tmp, s + at * sizeof(bf16), len * sizeof(bf16), cudaMemcpyDeviceToHost,
                                   g_cuda.stream));
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
        for (size_t i = 0; i < len; i++) dst[at + i] = bf16_to_float(tmp[i]);
    }
    free(tmp);
}

static void cu_upload_tokens(int *dst, const int *src, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(int), cudaMemcpyHostToDevice, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void cu_copy_to_host(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void cu_copy_from_host(void *dst, const void *src, size_t bytes) {
    ce_lse_invalidate(dst, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
}

static void cu_synchronize(void) { CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream)); }

// ---------------------------------------------------------------------------
// the table: memory above, and the families this backend has (kernels/<family>/table.cu).
// A family left NULL makes model_create name the layer that needs it.

extern "C" const Backend *backend_cuda(void) {
    static Backend b;
    if (b.name) return &b;
    cuda_init();
    memset(&b, 0, sizeof b);
    b.elem_size = sizeof(bf16);
    b.stat_size = sizeof(float);
    b.grad_size = sizeof(float);  // fp32 parameter gradients (docs/cuda.md, "Precision")
    b.keeps_master = 1;
    b.alloc = cu_alloc;
    b.free = cu_free;
    b.zero = cu_zero;
    b.upload = cu_upload;
    b.download = cu_download;
    b.upload_tokens = cu_upload_tokens;
    b.copy_to_host = cu_copy_to_host;
    b.copy_from_host = cu_copy_from_host;
    b.synchronize = cu_synchronize;
    b.core = cuda_core_ops();
    b.norm_glu = cuda_norm_glu_ops();
    b.delta_rule = cuda_delta_rule_ops();
    b.mla = cuda_mla_ops();
    b.attnres = cuda_attnres_ops();
    b.moe = cuda_moe_ops();
    b.optim = cuda_optim_ops();
    b.name = "cuda-bf16";  // last: marks the table as filled
    return &b;
}
