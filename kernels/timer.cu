// Event timing on the backend's stream, for the benchmarks (kernels/cuda_backend.h). The
// backend's stream is non-blocking, so events recorded on the legacy default stream would not
// bracket its work: these record on g_cuda.stream.
#include "kernels/common.cuh"
#include "kernels/cuda_backend.h"

static cudaEvent_t g_timer_start, g_timer_stop;

extern "C" void cuda_timer_start(void) {
    cuda_init();
    if (!g_timer_start) {
        CUDA_CHECK(cudaEventCreate(&g_timer_start));
        CUDA_CHECK(cudaEventCreate(&g_timer_stop));
    }
    CUDA_CHECK(cudaEventRecord(g_timer_start, g_cuda.stream));
}

extern "C" double cuda_timer_stop_ms(void) {
    if (!g_timer_start) die("cuda_timer_stop_ms: cuda_timer_start was not called");
    CUDA_CHECK(cudaEventRecord(g_timer_stop, g_cuda.stream));
    CUDA_CHECK(cudaEventSynchronize(g_timer_stop));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g_timer_start, g_timer_stop));
    return (double)ms;
}
