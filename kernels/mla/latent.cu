// The MLA latent pieces that are copies and a head sum (model/ops/mla/mla.h; docs/hybrid.md,
// "MLA backward, in order", steps 4 and 7): the split of kv_a's output [c | kr] and its
// backward (a concatenation), the per-head key k_h = [k_nope,h | kr] and its backward
// (k_nope's gradient into de's k columns, kr's gradient the sum over heads, in head order).
// Layouts: kv (N, r+dr); c (N, r); kr (N, dr); e (N, NH, dn+dv); k (N, NH, dn+dr); all bf16,
// rows contiguous. One thread per output element (the sum: one per (n, i), heads in order).
#include "kernels/common.cuh"

#define LAT_THREADS 256

static inline unsigned lat_blocks(size_t n) { return (unsigned)((n + LAT_THREADS - 1) / LAT_THREADS); }

// dir 0: kv -> (c, kr); dir 1: (c, kr) -> kv.  idx over N*(r+dr)
__global__ void mla_split_kv_kernel(bf16 *kv, bf16 *c, bf16 *kr, int N, int r, int dr, int dir) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int w = r + dr;
    if (idx >= (size_t)N * w) return;
    const size_t n = idx / w;
    const int i = (int)(idx % w);
    bf16 *other = i < r ? c + n * r + i : kr + n * dr + (i - r);
    if (dir == 0) *other = kv[idx];
    else kv[idx] = *other;
}

__global__ void mla_build_k_fwd_kernel(bf16 *k, const bf16 *e, const bf16 *kr, int N, int NH, int dn, int dv, int dr) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int dk = dn + dr;
    if (idx >= (size_t)N * NH * dk) return;
    const size_t nh = idx / dk;  // n*NH + h
    const int i = (int)(idx % dk);
    k[idx] = i < dn ? e[nh * (dn + dv) + i] : kr[(nh / NH) * dr + (i - dn)];
}

// idx over N*(NH*dn + dr): the first NH*dn of a row copy dk_nope into de, the last dr sum
__global__ void mla_build_k_bwd_kernel(bf16 *de, bf16 *dkr, const bf16 *dk, int N, int NH, int dn, int dv, int dr) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int w = NH * dn + dr, dK = dn + dr;
    if (idx >= (size_t)N * w) return;
    const size_t n = idx / w;
    const int j = (int)(idx % w);
    if (j < NH * dn) {
        const int h = j / dn, i = j % dn;
        de[(n * NH + h) * (dn + dv) + i] = dk[(n * NH + h) * dK + i];
    } else {
        const int i = j - NH * dn;
        float s = 0.f;  // heads in order
        for (int h = 0; h < NH; h++) s += __bfloat162float(dk[(n * NH + h) * dK + dn + i]);
        dkr[n * dr + i] = __float2bfloat16(s);
    }
}

extern "C" void cuda_mla_split_kv_forward(real *c, real *kr, const real *kv, int N, int r, int dr) {
    PROFILE("mla_split_kv_fwd");
    const size_t n = (size_t)N * (r + dr);
    if (n == 0) return;
    launch_kernel(mla_split_kv_kernel, dim3(lat_blocks(n)), dim3(LAT_THREADS), 0, (bf16 *)kv, (bf16 *)c, (bf16 *)kr,
                  N, r, dr, 0);
}

extern "C" void cuda_mla_split_kv_backward(real *dkv, const real *dc, const real *dkr, int N, int r, int dr) {
    PROFILE("mla_split_kv_bwd");
    const size_t n = (size_t)N * (r + dr);
    if (n == 0) return;
    launch_kernel(mla_split_kv_kernel, dim3(lat_blocks(n)), dim3(LAT_THREADS), 0, (bf16 *)dkv, (bf16 *)dc,
                  (bf16 *)dkr, N, r, dr, 1);
}

extern "C" void cuda_mla_build_k_forward(real *k, const real *e, const real *kr, int N, int NH, int dn, int dv,
                                         int dr) {
    PROFILE("mla_build_k_fwd");
    const size_t n = (size_t)N * NH * (dn + dr);
    if (n == 0) return;
    launch_kernel(mla_build_k_fwd_kernel, dim3(lat_blocks(n)), dim3(LAT_THREADS), 0, (bf16 *)k, (const bf16 *)e,
                  (const bf16 *)kr, N, NH, dn, dv, dr);
}

extern "C" void cuda_mla_build_k_backward(real *de, real *dkr, const real *dk, int N, int NH, int dn, int dv, int dr) {
    PROFILE("mla_build_k_bwd");
    const size_t n = (size_t)N * (NH * dn + dr);
    if (n == 0) return;
    launch_kernel(mla_build_k_bwd_kernel, dim3(lat_blocks(n)), dim3(LAT_THREADS), 0, (bf16 *)de, (bf16 *)dkr,
                  (const bf16 *)dk, N, NH, dn, dv, dr);
}
