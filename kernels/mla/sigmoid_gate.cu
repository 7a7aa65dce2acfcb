// The sigmoid output gate of gated MLA (model/ops/mla/mla.h; docs/hybrid.md, "Sigmoid output
// gate"): y = o sigma(z); do = dy sigma(z), dz = dy o sigma(z) (1 - sigma(z)). Elementwise over
// n bf16 values, 8 per thread (16-byte loads) where n and the pointers allow, else one.
#include "kernels/common.cuh"

__device__ __forceinline__ float gate_sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// VEC 8: element group idx = 8 values; VEC 1: one value
template <int VEC>
__global__ void sigmoid_gate_fwd_kernel(bf16 *y, const bf16 *o, const bf16 *z, size_t n) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((idx + 1) * VEC > n) return;
    if constexpr (VEC == 8) {
        float ov[8], zv[8], yv[8];
        load8(o + idx * 8, ov);
        load8(z + idx * 8, zv);
#pragma unroll
        for (int e = 0; e < 8; e++) yv[e] = ov[e] * gate_sigmoid(zv[e]);
        store8(y + idx * 8, yv);
    } else {
        y[idx] = __float2bfloat16(__bfloat162float(o[idx]) * gate_sigmoid(__bfloat162float(z[idx])));
    }
}

template <int VEC>
__global__ void sigmoid_gate_bwd_kernel(bf16 *d_o, bf16 *dz, const bf16 *dy, const bf16 *o, const bf16 *z, size_t n) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((idx + 1) * VEC > n) return;
    float dyv[VEC], ov[VEC], zv[VEC], dov[VEC], dzv[VEC];
    if constexpr (VEC == 8) {
        load8(dy + idx * 8, dyv);
        load8(o + idx * 8, ov);
        load8(z + idx * 8, zv);
    } else {
        dyv[0] = __bfloat162float(dy[idx]), ov[0] = __bfloat162float(o[idx]), zv[0] = __bfloat162float(z[idx]);
    }
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        const float s = gate_sigmoid(zv[e]);
        dov[e] = dyv[e] * s;
        dzv[e] = dyv[e] * ov[e] * s * (1.f - s);
    }
    if constexpr (VEC == 8) {
        store8(d_o + idx * 8, dov);
        store8(dz + idx * 8, dzv);
    } else {
        d_o[idx] = __float2bfloat16(dov[0]);
        dz[idx] = __float2bfloat16(dzv[0]);
    }
}

static inline unsigned gate_blocks(size_t groups) { return (unsigned)((groups + 255) / 256); }

extern "C" void cuda_sigmoid_gate_forward(real *y, const real *o, const real *z, size_t n) {
    PROFILE("sigmoid_gate_fwd");
    if (n == 0) return;
    if (n % 8 == 0 && is_aligned16(y) && is_aligned16(o) && is_aligned16(z))
        launch_kernel(sigmoid_gate_fwd_kernel<8>, dim3(gate_blocks(n / 8)), dim3(256), 0, (bf16 *)y, (const bf16 *)o,
                      (const bf16 *)z, n);
    else
        launch_kernel(sigmoid_gate_fwd_kernel<1>, dim3(gate_blocks(n)), dim3(256), 0, (bf16 *)y, (const bf16 *)o,
                      (const bf16 *)z, n);
}

extern "C" void cuda_sigmoid_gate_backward(real *d_o, real *dz, const real *dy, const real *o, const real *z, size_t n) {
    PROFILE("sigmoid_gate_bwd");
    if (n == 0) return;
    if (n % 8 == 0 && is_aligned16(d_o) && is_aligned16(dz) && is_aligned16(dy) && is_aligned16(o) && is_aligned16(z))
        launch_kernel(sigmoid_gate_bwd_kernel<8>, dim3(gate_blocks(n / 8)), dim3(256), 0, (bf16 *)d_o, (bf16 *)dz,
                      (const bf16 *)dy, (const bf16 *)o, (const bf16 *)z, n);
    else
        launch_kernel(sigmoid_gate_bwd_kernel<1>, dim3(gate_blocks(n)), dim3(256), 0, (bf16 *)d_o, (bf16 *)dz,
                      (const bf16 *)dy, (const bf16 *)o, (const bf16 *)z, n);
}
