// The absorbed (MQA-style) attention of MLA decoding over the compressed cache
// (model/ops/mla/mla.h mla_absorbed_attention; docs/hybrid.md, "Absorbed (MQA-style) decode
// form"). One sequence; query row i (token Tc - Nq + i) attends cache rows 0 .. Tc - Nq + i.
//   cache (Tc, r+dr) bf16, row t = [chat_t | kr_t] (model/mixer_mla.c appends the rows with
//   mla_split_kv_backward, in the backend's element type); q (Nq, NH*dqk) bf16, per head
//   [q_nope | q_rope]; w_kvb (NH*(dn+dv), r) bf16; out (Nq, NH*dv) bf16.
// One block per (query row, head), a simple kernel for the decode step (Nq small):
//   qt = [W_UK,h^T q_nope | q_rope] (fp32, shared memory), then the cache in chunks of
//   ABS_CHUNK rows: scores (one warp per row, fixed-tree warp sums), the chunk's maximum,
//   p = exp(score - max) with the running (online-softmax) rescale of ctx and of the sum,
//   ctx_c += sum_t p_t chat_t,c (one thread per c, rows in order); finally
//   out = W_UV,h ctx / sum (one warp per output). Fixed orders throughout: deterministic.
#include <math.h>

#include "kernels/common.cuh"

#define ABS_THREADS 256
#define ABS_WARPS (ABS_THREADS / 32)
#define ABS_CHUNK 256  // cache rows per step (their scores in shared memory)
#define ABS_CTX 4      // ctx values per thread: r <= ABS_THREADS * ABS_CTX
static_assert(ABS_CHUNK <= ABS_THREADS, "one thread per cached row of a chunk");

// maximum over the block (blockDim.x = ABS_THREADS); every thread gets it
__device__ __forceinline__ float abs_block_max(float v) {
    __shared__ float part[ABS_WARPS];
    __shared__ float total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float m = lane < ABS_WARPS ? part[lane] : -INFINITY;
        m = warp_max(m);
        if (lane == 0) total = m;
    }
    __syncthreads();
    return total;
}

// dynamic shared memory: qn (dn) | qt (r+dr) | sc (ABS_CHUNK) | ctx (r), fp32
__global__ void __launch_bounds__(ABS_THREADS)
    mla_absorbed_kernel(bf16 *out, const bf16 *q, const bf16 *cache, const bf16 *w_kvb, int Nq, int Tc, int NH,
                        int dn, int dr, int dv, int r, float scale) {
    DYNAMIC_SMEM(float, smem);
    const int dqk = dn + dr, dc = r + dr;
    float *qn = smem, *qt = qn + dn, *sc = qt + dc, *ctxs = sc + ABS_CHUNK;
    const int i = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bf16 *qh = q + ((size_t)i * NH + h) * dqk;
    const bf16 *wuk = w_kvb + (size_t)h * (dn + dv) * r;  // (dn, r)
    const bf16 *wuv = wuk + (size_t)dn * r;                // (dv, r)

    for (int a = tid; a < dqk; a += ABS_THREADS) {
        const float x = __bfloat162float(qh[a]);
        if (a < dn) qn[a] = x;
        else qt[r + a - dn] = x;  // q_rope
    }
    __syncthreads();
    for (int c = tid; c < r; c += ABS_THREADS) {  // qt_c = sum_a q_nope,a W_UK[a, c]
        float s = 0.f;
        for (int a = 0; a < dn; a++) s += qn[a] * __bfloat162float(wuk[(size_t)a * r + c]);
        qt[c] = s;
    }
    __syncthreads();

    const int last = Tc - Nq + i;  // causal: cache rows 0 .. last
    float ctx[ABS_CTX], m_run = -INFINITY, l_run = 0.f;
    for (int m = 0; m < ABS_CTX; m++) ctx[m] = 0.f;
    for (int t0 = 0; t0 <= last; t0 += ABS_CHUNK) {
        const int n = min(ABS_CHUNK, last + 1 - t0);
        for (int tt = warp; tt < n; tt += ABS_WARPS) {  // scores, one warp per row
            const bf16 *row = cache + (size_t)(t0 + tt) * dc;
            float s = 0.f;
            for (int c = lane; c < dc; c += 32) s += qt[c] * __bfloat162float(row[c]);
            s = warp_sum(s);
            if (lane == 0) sc[tt] = s * scale;
        }
        __syncthreads();
        const float cm = abs_block_max(tid < n ? sc[tid] : -INFINITY);  // n <= ABS_THREADS
        const float mnew = fmaxf(m_run, cm), corr = expf(m_run - mnew);  // m_run = -inf: corr 0
        __syncthreads();  // every thread has read sc[tid] before it is overwritten
        float p = 0.f;
        if (tid < n) {
            p = expf(sc[tid] - mnew);
            sc[tid] = p;
        }
        const float psum = block_sum(p);  // its barriers also publish sc
        l_run = l_run * corr + psum;
        m_run = mnew;
        for (int m = 0; m < ABS_CTX; m++) {
            const int c = tid + m * ABS_THREADS;
            if (c >= r) break;
            float s = ctx[m] * corr;
            for (int tt = 0; tt < n; tt++) s += sc[tt] * __bfloat162float(cache[(size_t)(t0 + tt) * dc + c]);
            ctx[m] = s;
        }
        __syncthreads();  // sc is rewritten by the next chunk
    }
    for (int m = 0; m < ABS_CTX; m++) {
        const int c = tid + m * ABS_THREADS;
        if (c < r) ctxs[c] = ctx[m];
    }
    __syncthreads();
    const float inv = 1.f / l_run;
    for (int a = warp; a < dv; a += ABS_WARPS) {  // out_a = W_UV[a, :] . ctx / sum
        float s = 0.f;
        for (int c = lane; c < r; c += 32) s += __bfloat162float(wuv[(size_t)a * r + c]) * ctxs[c];
        s = warp_sum(s);
        if (lane == 0) out[((size_t)i * NH + h) * dv + a] = __float2bfloat16(s * inv);
    }
}

extern "C" void cuda_mla_absorbed_attention(real *out, const real *q, const real *cache, const real *w_kvb, int Nq,
                                            int Tc, int NH, int dn, int dr, int dv, int r, double scale) {
    PROFILE("mla_absorbed");
    if (Nq <= 0 || Nq > Tc || NH <= 0 || dn <= 0 || dr < 0 || dv <= 0 || r <= 0)
        die("cuda_mla_absorbed_attention: bad shape Nq=%d Tc=%d NH=%d dn=%d dr=%d dv=%d r=%d", Nq, Tc, NH, dn, dr, dv,
            r);
    if (r > ABS_THREADS * ABS_CTX) die("cuda_mla_absorbed_attention: kv rank %d above %d", r, ABS_THREADS * ABS_CTX);
    if (NH > 65535) die("cuda_mla_absorbed_attention: %d heads above the grid's 65535", NH);
    const size_t smem = (size_t)(dn + (r + dr) + ABS_CHUNK + r) * sizeof(float);
    launch_kernel(mla_absorbed_kernel, dim3((unsigned)Nq, (unsigned)NH), dim3(ABS_THREADS), smem, (bf16 *)out,
                  (const bf16 *)q, (const bf16 *)cache, (const bf16 *)w_kvb, Nq, Tc, NH, dn, dr, dv, r, (float)scale);
}
