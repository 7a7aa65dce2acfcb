// Linear layers through cuBLASLt: bf16 operands, fp32 accumulation, bf16 results, the
// bias added in the GEMM epilogue. model/ops/matmul.c gives the equations. The parameter
// gradients (dw, dbias, dpre_bias) are fp32 (model/backend.h, grad_size; docs/cuda.md,
// "Precision"): the dW GEMM has fp32 C = D = dw with beta 1, the bias sums are added in fp32.
//
// cuBLAS is column-major: a row-major (R, K) matrix is a column-major (K, R) one. So
//   out (N, OC) = inp (N, C) w^T         is  out^T (OC, N) = w'^T (OC, C) inp' (C, N)   [TN]
//   dinp (N, C) = dout (N, OC) w          is  dinp^T (C, N) = w' (C, OC) dout' (OC, N)   [NN]
//   dw (OC, C) += dout^T inp              is  dw^T (C, OC) += inp' (C, N) dout'^T (N, OC) [NT, beta 1, fp32 C/D]
// where x' is x's memory read column-major. dbias (sum of dout's rows) is a deterministic
// kernel: fixed row chunks, then the chunks added in order. HYBRID_CUDA_DBIAS_GEMM=1 takes
// it from the dw GEMM's BGRADB epilogue instead (the reduction of op(B) = dout over
// k = N; measured slower, see dbias_in_gemm).
//
// Plans (descriptors, layouts and the heuristic's algorithm) are cached per shape,
// transposition, epilogue, beta and pointer alignment, so steady-state calls do no
// heuristic queries. The cache holds MAX_PLANS; past that the least recently used plan
// is destroyed and rebuilt when needed again (sampling through full forwards makes a new
// shape for every sequence length). The heuristic gives the same algorithm for the same
// key, so a rebuilt plan computes the same bits.
#include <string.h>

#include "kernels/common.cuh"

enum { EPI_NONE, EPI_GELU_AUX, EPI_DGELU, EPI_BGRADB, EPI_DGELU_BGRAD };
// + bias when a bias pointer is given. EPI_BGRADB: the bias pointer RECEIVES (fp32, written)
// the sums of op(B) over k (n values). EPI_DGELU_BGRAD: D = X * gelu'(aux) as EPI_DGELU, and
// the bias pointer RECEIVES (fp32, written) sum_j D(i, j) over D's n columns (m values):
// cuBLASLt's DGELU_BGRAD, the bias gradient of the layer that made aux. (Their bf16-sum forms
// are gone: a bias gradient is fp32 and must not be rounded to bf16 on the way.)

#ifdef HYBRID_CUDA_EMU
// The CPU emulator has no cuBLASLt: the same GEMM and epilogue as a plain loop over bf16
// inputs with fp32 accumulation (tests/cuda_emu/cuda_emu.h, emu_lt_matmul).
static int gemm_run(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, long long strideA,
                    const bf16 *B, int ldb, long long strideB, const void *C, void *D, int cd_f32, int ldc,
                    long long strideC, float alpha, float beta, const void *bias, int batch, int epi, const bf16 *aux) {
    if (m <= 0 || n <= 0) return 1;
    if (k <= 0) die("gemm_bf16: k = %d", k);
    if (beta == 0.f) C = D;
    const int e = epi == EPI_GELU_AUX ? EMU_EPI_GELU_AUX
                  : epi == EPI_DGELU  ? EMU_EPI_DGELU
                  : epi == EPI_BGRADB ? EMU_EPI_BGRADB_F32
                  : epi == EPI_DGELU_BGRAD ? EMU_EPI_DGELU_BGRAD_F32
                                           : EMU_EPI_NONE;
    emu_lt_matmul(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, D, cd_f32, ldc, strideC,
                  batch < 1 ? 1 : batch, e, (void *)bias, (bf16 *)aux);
    return 1;
}
#else
static int epi_is_bgrad(int epi) { return epi == EPI_BGRADB || epi == EPI_DGELU_BGRAD; }
static int epi_has_aux(int epi) { return epi == EPI_GELU_AUX || epi == EPI_DGELU || epi == EPI_DGELU_BGRAD; }

typedef struct {
    int transa, transb, m, n, k, lda, ldb, ldc, batch, bias, beta_zero, c_is_d, epi;
    int cd_f32;  // C and D fp32 (A and B bf16): an fp32 accumulator (gemm_bf16_f32)
    long long sa, sb, sc;
    int align;  // min alignment (bytes, up to 256) of the pointers
} GemmKey;

typedef struct {
    GemmKey key;
    unsigned long long last_use;  // g_use_clock at the last call (LRU eviction)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

#define MAX_PLANS 256
static GemmPlan g_plans[MAX_PLANS];
static int g_nplans;
static unsigned long long g_use_clock;

static int ptr_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 2 && (u % (uintptr_t)a)) a >>= 1;
    return a;
}

static void set_layout_batch(cublasLtMatrixLayout_t l, int batch, long long stride) {
    if (batch <= 1) return;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride));
}

// NULL when the heuristic has no algorithm for a bias-gradient epilogue (EPI_BGRADB,
// EPI_DGELU_BGRAD: the caller then sums the bias with its own kernel); dies for any other.
static GemmKey g_noplan[MAX_PLANS];
static int g_nnoplan;

static GemmPlan *get_plan(const GemmKey *key) {
    for (int i = 0; i < g_nplans; i++)
        if (!memcmp(&g_plans[i].key, key, sizeof *key)) {
            g_plans[i].last_use = ++g_use_clock;
            return &g_plans[i];
        }
    for (int i = 0; i < g_nnoplan; i++)
        if (!memcmp(&g_noplan[i], key, sizeof *key)) return NULL;
    // the new plan is built aside and enters the cache only once cuBLASLt has an algorithm
    GemmPlan built, *p = &built;
    memset(p, 0, sizeof *p);
    p->key = *key;
    p->last_use = ++g_use_clock;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (key->epi == EPI_GELU_AUX) epi = key->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (key->epi == EPI_DGELU) epi = CUBLASLT_EPILOGUE_DGELU;
    if (key->epi == EPI_BGRADB) epi = CUBLASLT_EPILOGUE_BGRADB;
    if (key->epi == EPI_DGELU_BGRAD) epi = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi_has_aux(key->epi)) {
        int64_t ld = key->ldc;  // aux has D's shape and leading dimension
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    if (key->bias) {  // a bias gradient is fp32 (a parameter gradient); a forward bias is a bf16 parameter
        cudaDataType_t bt = epi_is_bgrad(key->epi) ? CUDA_R_32F : CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    // stored shapes: A is (m, k) after op, so stored (k, m) when transposed
    int ar = key->transa ? key->k : key->m, ac = key->transa ? key->m : key->k;
    int br = key->transb ? key->n : key->k, bc = key->transb ? key->k : key->n;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, ar, ac, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, br, bc, key->ldb));
    const cudaDataType_t cd = key->cd_f32 ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, cd, key->m, key->n, key->ldc));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, cd, key->m, key->n, key->ldc));
    set_layout_batch(p->la, key->batch, key->sa);
    set_layout_batch(p->lb, key->batch, key->sb);
    set_layout_batch(p->lc, key->batch, key->sc);
    set_layout_batch(p->ld, key->batch, key->sc);

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = g_cuda.lt_workspace_size;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t al = (uint32_t)key->align;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const int bgrad = epi_is_bgrad(key->epi);
    // a bias-gradient epilogue the library rejects (cuBLASLt 13 answers "invalid value"
    // for some bias types) is a missing plan, not an error: the caller falls back
    cublasStatus_t hst =
        cublasLtMatmulAlgoGetHeuristic(g_cuda.lt, p->desc, p->la, p->lb, p->lc, p->ld, pref, 1, &res, &found);
    if (!bgrad) CUBLAS_CHECK(hst);
    else if (hst != CUBLAS_STATUS_SUCCESS) found = 0;
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1 && bgrad) {
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
        if (g_nnoplan < MAX_PLANS) g_noplan[g_nnoplan++] = *key;  // remembered, or asked again next time
        return NULL;
    }
    if (found < 1)
        die("cuBLASLt: no algorithm for the GEMM m=%d n=%d k=%d (trans %d%d, bias %d, batch %d, align %d, C/D %s)",
            key->m, key->n, key->k, key->transa, key->transb, key->bias, key->batch, key->align,
            key->cd_f32 ? "fp32" : "bf16");
    p->algo = res.algo;
    GemmPlan *slot = &g_plans[g_nplans];
    if (g_nplans == MAX_PLANS) {  // full: destroy the least recently used plan and reuse its slot
        slot = &g_plans[0];
        for (int i = 1; i < MAX_PLANS; i++)
            if (g_plans[i].last_use < slot->last_use) slot = &g_plans[i];
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(slot->la));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(slot->lb));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(slot->lc));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(slot->ld));
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(slot->desc));
    } else {
        g_nplans++;
    }
    *slot = built;
    return slot;
}

// Returns 0 (nothing launched) only when epi is a bias-gradient epilogue (EPI_BGRADB,
// EPI_DGELU_BGRAD) and no algorithm supports it. For EPI_BGRADB, bias is an fp32 output (n
// floats); EPI_DGELU_BGRAD fp32 (m floats). cd_f32: C and D are fp32 (else bf16).
static int gemm_run(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, long long strideA,
                    const bf16 *B, int ldb, long long strideB, const void *C, void *D, int cd_f32, int ldc,
                    long long strideC, float alpha, float beta, const void *bias, int batch, int epi, const bf16 *aux) {
    if (m <= 0 || n <= 0) return 1;
    if (k <= 0) die("gemm_bf16: k = %d", k);
    if (beta == 0.f) C = D;
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.transa = transa;
    key.transb = transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.batch = batch < 1 ? 1 : batch;
    key.sa = key.batch > 1 ? strideA : 0;
    key.sb = key.batch > 1 ? strideB : 0;
    key.sc = key.batch > 1 ? strideC : 0;
    key.bias = bias != NULL;
    key.beta_zero = beta == 0.f;
    key.c_is_d = C == D;
    key.epi = epi;
    key.cd_f32 = cd_f32;
    int al = ptr_align(A);
    if (aux && ptr_align(aux) < al) al = ptr_align(aux);
    if (ptr_align(B) < al) al = ptr_align(B);
    if (ptr_align(C) < al) al = ptr_align(C);
    if (ptr_align(D) < al) al = ptr_align(D);
    if (bias && ptr_align(bias) < al) al = ptr_align(bias);
    key.align = al;
    GemmPlan *p = get_plan(&key);
    if (!p) return 0;
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epi_has_aux(epi))
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof aux));
    CUBLAS_CHECK(cublasLtMatmul(g_cuda.lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, C, p->lc, D, p->ld, &p->algo,
                                g_cuda.lt_workspace, g_cuda.lt_workspace_size, g_cuda.stream));
    LAUNCH_CHECK();
    return 1;
}
#endif

// bf16 C and D (every GEMM but gemm_bf16_f32's)
static int gemm_ex(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, long long strideA,
                   const bf16 *B, int ldb, long long strideB, const bf16 *C, bf16 *D, int ldc, long long strideC,
                   float alpha, float beta, const void *bias, int batch, int epi, const bf16 *aux) {
    return gemm_run(transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C, D, 0, ldc, strideC, alpha, beta,
                    bias, batch, epi, aux);
}

// bf16 A and B, fp32 C and D, one batch: D = alpha op(A) op(B) + beta C with the fp32
// accumulation never rounded to bf16 (C may be D: an fp32 accumulator, beta = 1; the fp32
// weight gradients). cuBLASLt supports this type combination (compute 32F, scale 32F) for
// every shape the bf16 one takes; a shape it had no algorithm for would die in get_plan,
// naming it (C/D fp32). epi: EPI_NONE, or EPI_BGRADB with bias (fp32, n values, written):
// then returns 0 where cuBLASLt has no algorithm for it (nothing launched).
static int gemm_bf16_f32(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, const bf16 *B, int ldb,
                         const float *C, float *D, int ldc, float alpha, float beta, float *bias = NULL,
                         int epi = EPI_NONE) {
    return gemm_run(transa, transb, m, n, k, A, lda, 0, B, ldb, 0, C, D, 1, ldc, 0, alpha, beta, bias, 1, epi, NULL);
}

void gemm_bf16(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, long long strideA,
               const bf16 *B, int ldb, long long strideB, const bf16 *C, bf16 *D, int ldc, long long strideC,
               float alpha, float beta, const bf16 *bias, int batch) {
    gemm_ex(transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C, D, ldc, strideC, alpha, beta, bias, batch,
            EPI_NONE, NULL);
}

// ---------------------------------------------------------------------------
// dbias[o] += sum_i dout[i, o] (fp32 dbias), in two deterministic steps (fixed order, no atomics):
//   bias_partial_vec_kernel: block (8, 32) covers 64 columns (8 per thread, one 16-byte
//     load a row: 8 lanes read 128 contiguous bytes) of one chunk of BIAS_ROWS_PER_CHUNK
//     rows; row lane y takes rows y, y + 32, ... in order, four loads in flight at a time,
//     then the 32 lanes are added in order in shared memory -> partial[chunk][col] (fp32).
//   bias_reduce_kernel: block (32, 8) covers 32 columns; lane y adds chunks y, y + 8, ...
//     in order, then the 8 lane sums are added in order.
// GPT-2 124M at B64 T1024 (N = 65536): 64 chunks; the partial pass reads N x OC bf16 once
// (100.7 MB at OC = 768, 402.7 MB at OC = 3072) with 12 .. 48 x 64 blocks; the reduce
// reads 64 x OC fp32 from L2 with 8 loads per thread. (Before: 256-row chunks and one
// thread per column adding 256 chunks serially, 3 blocks at OC = 768: latency-bound.)

#define BIAS_ROWS_PER_CHUNK 1024
#define BIAS_MAX_CHUNKS 256

__global__ void bias_partial_vec_kernel(float *partial, const bf16 *dout, int N, int OC, int rows_per_chunk) {
    __shared__ float sh[32][64 + 4];
    const int tx = threadIdx.x, ty = threadIdx.y;  // (8, 32)
    const int col = (blockIdx.x * 8 + tx) * 8;
    const int row0 = blockIdx.y * rows_per_chunk, row1 = min(row0 + rows_per_chunk, N);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (col < OC) {
        const bf16 *p = dout + col;
        int r = row0 + ty;
        for (; r + 96 < row1; r += 128) {  // rows r, r + 32, r + 64, r + 96: loads first, adds in row order
            float f[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) load8(p + (size_t)(r + 32 * u) * OC, f[u]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += f[u][k];
        }
        for (; r < row1; r += 32) {
            float f[8];
            load8(p + (size_t)r * OC, f);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += f[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) sh[ty][tx * 8 + k] = acc[k];
    __syncthreads();
    const int t = ty * 8 + tx;  // 0..255: the first 64 add one column each
    const int c = blockIdx.x * 64 + t;
    if (t < 64 && c < OC) {
        float s = 0.f;
        for (int y = 0; y < 32; y++) s += sh[y][t];
        partial[(size_t)blockIdx.y * OC + c] = s;
    }
}

__global__ void bias_partial_scalar_kernel(float *partial, const bf16 *dout, int N, int OC, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    int row0 = blockIdx.y * rows_per_chunk, row1 = min(row0 + rows_per_chunk, N);
    float s = 0.f;
    for (int r = row0; r < row1; r++) s += __bfloat162float(dout[(size_t)r * OC + c]);
    partial[(size_t)blockIdx.y * OC + c] = s;
}

__global__ void bias_reduce_kernel(float *dbias, const float *partial, int chunks, int OC) {
    __shared__ float sh[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (c < OC)
        for (int k = threadIdx.y; k < chunks; k += 8) s += partial[(size_t)k * OC + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y || c >= OC) return;
    s = 0.f;
    for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
    dbias[c] += s;  // fp32 gradient (+=)
}

static void bias_backward(float *dbias, const bf16 *dout, int N, int OC) {
    if (N <= 0 || OC <= 0) return;
    int chunks = (N + BIAS_ROWS_PER_CHUNK - 1) / BIAS_ROWS_PER_CHUNK;
    if (chunks > BIAS_MAX_CHUNKS) chunks = BIAS_MAX_CHUNKS;
    int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    float *partial = (float *)scratch_get((size_t)chunks * OC * sizeof(float));
    if (OC % 8 == 0 && is_aligned16(dout)) {
        dim3 grid((OC + 63) / 64, chunks), block(8, 32);
        launch_kernel(bias_partial_vec_kernel, grid, block, 0, partial, dout, N, OC, rows_per_chunk);
    } else {
        dim3 grid((OC + 255) / 256, chunks);
        launch_kernel(bias_partial_scalar_kernel, grid, 256, 0, partial, dout, N, OC, rows_per_chunk);
    }
    launch_kernel(bias_reduce_kernel, (OC + 31) / 32, dim3(32, 8), 0, dbias, partial, chunks, OC);
}

// dbias[o] += acc[o] (the fp32 sums a bias-gradient epilogue wrote; both fp32)
__global__ void bias_add_kernel(float *dbias, const float *acc, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < OC) dbias[c] += acc[c];
}

// The switches below fall back to the column-sum kernel where cuBLASLt has no algorithm for
// their epilogue with an fp32 bias gradient (there is no bf16 form: it would round the
// gradient); said once a switch (*said) on stderr, naming it, so that it does not go unnoticed.
static void note_no_bgrad_plan(int *said, const char *var, const char *epi, int m, int n, int k) {
    if ((*said)++) return;
    fprintf(stderr,
            "hybrid: note: %s on, but cuBLASLt has no %s algorithm with an fp32 bias gradient for m=%d n=%d k=%d: "
            "the column-sum kernel sums it (the same gradient; unset %s to silence this)\n",
            var, epi, m, n, k, var);
}

// HYBRID_CUDA_DBIAS_GEMM=1: the BGRADB epilogue instead of the column-sum kernel. Off by
// default: on the H200 (cuBLASLt 13.0, 2026-11-29) the epilogue slowed the dw GEMMs by
// more than the kernel costs (matmul_bwd 52.7 ms/step against 50.8 at GPT-2 124M B=64).
static int dbias_in_gemm(void) {
    static int v = -1;
    if (v < 0) v = env_flag("HYBRID_CUDA_DBIAS_GEMM");
    return v;
}

// dw += dout^T inp (the GEMM D^T (C, OC) += inp' (C, N) dout'^T (N, OC), fp32 C = D = dw,
// beta 1: the GEMM's fp32 sum added to the fp32 gradient, no bf16 rounding) and, when dbias
// is given, dbias += sum_rows dout: the BGRADB epilogue reduces op(B) = dout over k = N in the
// same GEMM (into fp32 scratch, D's type, then added: the epilogue writes), else the
// column-sum kernel. All fixed order for a fixed plan: deterministic.
static void dw_and_dbias(float *dw, float *dbias, const bf16 *dout, const bf16 *inp, int N, int C, int OC) {
    if (dbias && dbias_in_gemm() && N > 0 && OC > 0 && C > 0) {
        float *acc = (float *)scratch_get((size_t)OC * sizeof(float));
        if (gemm_bf16_f32(0, 1, C, OC, N, inp, C, dout, OC, dw, dw, C, 1.f, 1.f, acc, EPI_BGRADB)) {
            launch_kernel(bias_add_kernel, (OC + 255) / 256, 256, 0, dbias, (const float *)acc, OC);
            return;
        }
        static int said;
        note_no_bgrad_plan(&said, "HYBRID_CUDA_DBIAS_GEMM", "BGRADB", C, OC, N);
    }
    gemm_bf16_f32(0, 1, C, OC, N, inp, C, dout, OC, dw, dw, C, 1.f, 1.f);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

void cuda_matmul_forward(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC) {
    PROFILE("matmul_fwd");
    PROFILE_SHAPE("matmul_fwd", N, C, OC);
    ce_lse_invalidate(out, (size_t)N * OC * sizeof(bf16));
    gemm_bf16(1, 0, OC, N, C, (const bf16 *)w, C, 0, (const bf16 *)inp, C, 0, NULL, (bf16 *)out, OC, 0, 1.f, 0.f,
              (const bf16 *)bias, 1);
}

void cuda_matmul_backward(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w, int N,
                          int C, int OC) {
    PROFILE("matmul_bwd");
    PROFILE_SHAPE("matmul_bwd", N, C, OC);
    ce_lse_invalidate(dinp, (size_t)N * C * sizeof(bf16));
    // dinp (written)
    gemm_bf16(0, 0, C, N, OC, (const bf16 *)w, C, 0, (const bf16 *)dout, OC, 0, NULL, (bf16 *)dinp, C, 0, 1.f, 0.f,
              NULL, 1);
    dw_and_dbias((float *)dw, (float *)dbias, (const bf16 *)dout, (const bf16 *)inp, N, C, OC);
}

// Optional fused op (model/ops/core/core.h): matmul_backward with the input gradient
// accumulated, dinp += dout w: the same GEMM with beta = 1 and C = D = dinp (in place),
// instead of a GEMM into scratch and an add_inplace. dw and dbias as matmul_backward.
void cuda_matmul_backward_acc(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                              int N, int C, int OC) {
    PROFILE("matmul_bwd_acc");
    PROFILE_SHAPE("matmul_bwd_acc", N, C, OC);
    ce_lse_invalidate(dinp, (size_t)N * C * sizeof(bf16));
    gemm_bf16(0, 0, C, N, OC, (const bf16 *)w, C, 0, (const bf16 *)dout, OC, 0, (const bf16 *)dinp, (bf16 *)dinp, C,
              0, 1.f, 1.f, NULL, 1);
    dw_and_dbias((float *)dw, (float *)dbias, (const bf16 *)dout, (const bf16 *)inp, N, C, OC);
}

// Optional fused ops (model/backend.h): the GELU of the MLP in the GEMM epilogues.
// Forward: act = gelu(pre), pre = inp w^T + bias, both written by one GEMM.
void cuda_matmul_gelu_forward(real *act, real *pre, const real *inp, const real *w, const real *bias, int N, int C,
                              int OC) {
    PROFILE("matmul_gelu_fwd");
    PROFILE_SHAPE("matmul_gelu_fwd", N, C, OC);
    ce_lse_invalidate(act, (size_t)N * OC * sizeof(bf16));
    gemm_ex(1, 0, OC, N, C, (const bf16 *)w, C, 0, (const bf16 *)inp, C, 0, NULL, (bf16 *)act, OC, 0, 1.f, 0.f,
            (const bf16 *)bias, 1, EPI_GELU_AUX, (const bf16 *)pre);
}

// The up projection's bias gradient (dpre_bias += sum_rows dpre, fp32) of the GELU MLP: by
// default the column-sum kernel over the dpre the DGELU GEMM wrote (N x C bf16 read again:
// 403 MB a layer at GPT-2 124M B64 T1024, C = 3072; ~1.4 ms a step at 3.3 TB/s for the 12
// layers); with HYBRID_CUDA_DGELU_BGRAD=1 cuBLASLt's DGELU_BGRAD epilogue sums the rows of D
// in the same GEMM (fp32 into scratch: CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, as dpre is bf16;
// cublasLt.h gives a bias gradient D's type by default, and cuBLASLt 13.1 on the H200 had no
// fp32 one at GPT-2's shapes: docs/cuda.md), then one small kernel adds the C sums into
// dpre_bias; where cuBLASLt has no such algorithm (no bf16-sum form: it would round the
// gradient) the kernel runs, said once on stderr. The
// epilogue sums the fp32 values before they are rounded to dpre's bf16, the kernel the stored
// bf16: the two differ in rounding only. Off by default until the H200 has measured it (the
// BGRADB epilogue of the dW GEMM was measured slower than the kernel; DGELU_BGRAD reduces over the
// output's columns in the epilogue instead of over k in the main loop, so it may not be).
// cuda_matmul_set_dgelu_bgrad (1 on, 0 off, -1 the environment) lets the tests run both;
// cuda_matmul_dgelu_bgrad_path says which path the last call with a dpre_bias took (0 the
// kernel, 1 the epilogue).
static int g_dgelu_bgrad_force = -1, g_dgelu_bgrad_path = -1;
extern "C" void cuda_matmul_set_dgelu_bgrad(int on) { g_dgelu_bgrad_force = on < 0 ? -1 : !!on; }
extern "C" int cuda_matmul_dgelu_bgrad_path(void) { return g_dgelu_bgrad_path; }
static int dgelu_bgrad_on(void) {
    static int env = -1;
    if (env < 0) env = env_flag("HYBRID_CUDA_DGELU_BGRAD");
    return g_dgelu_bgrad_force >= 0 ? g_dgelu_bgrad_force : env;
}

// Backward of the layer that reads act = gelu(pre): dpre = (dout w) * gelu'(pre) in the
// input-gradient GEMM's epilogue (D^T = dpre' (C, N), aux = pre with D's leading dimension);
// dpre_bias += sum_rows dpre (above); dw and dbias as matmul_backward.
void cuda_matmul_backward_gelu(real *dpre, real *dw, real *dbias, real *dpre_bias, const real *dout, const real *act,
                               const real *w, const real *pre, int N, int C, int OC) {
    PROFILE("matmul_bwd");
    PROFILE_SHAPE("matmul_bwd", N, C, OC);
    ce_lse_invalidate(dpre, (size_t)N * C * sizeof(bf16));
    const bf16 *W = (const bf16 *)w, *DO = (const bf16 *)dout, *P = (const bf16 *)pre;
    bf16 *D = (bf16 *)dpre;
    int done = 0;
    if (dpre_bias && dgelu_bgrad_on() && N > 0 && C > 0 && OC > 0) {
        float *acc = (float *)scratch_get((size_t)C * sizeof(float));
        if (gemm_ex(0, 0, C, N, OC, W, C, 0, DO, OC, 0, NULL, D, C, 0, 1.f, 0.f, acc, 1, EPI_DGELU_BGRAD, P)) {
            launch_kernel(bias_add_kernel, (C + 255) / 256, 256, 0, (float *)dpre_bias, (const float *)acc, C);
            done = 1;
        } else {
            static int said;
            note_no_bgrad_plan(&said, "HYBRID_CUDA_DGELU_BGRAD", "DGELU_BGRAD", C, N, OC);
        }
    }
    if (!done) {
        gemm_ex(0, 0, C, N, OC, W, C, 0, DO, OC, 0, NULL, D, C, 0, 1.f, 0.f, NULL, 1, EPI_DGELU, P);
        if (dpre_bias) bias_backward((float *)dpre_bias, D, N, C);
    }
    if (dpre_bias) g_dgelu_bgrad_path = done;
    dw_and_dbias((float *)dw, (float *)dbias, DO, (const bf16 *)act, N, C, OC);
}
