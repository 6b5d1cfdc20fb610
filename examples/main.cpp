// One decoder step's worth of fused add + RMSNorm from C++, on memory from the CUDA runtime:
// bf16 activations, an fp32 residual stream, in place (vLLM convention).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "addrmsnorm/addrmsnorm.hpp"

static uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

int main() {
    const int64_t rows = 4, hidden = 4096;
    std::vector<uint16_t> x(rows * hidden), w(hidden);
    std::vector<float> residual(rows * hidden);
    for (int64_t i = 0; i < rows * hidden; ++i) {
        x[i] = to_bf16(std::sin(0.001f * static_cast<float>(i)));
        residual[i] = std::cos(0.0007f * static_cast<float>(i));
    }
    for (int64_t j = 0; j < hidden; ++j) w[j] = to_bf16(1.0f + 0.001f * static_cast<float>(j % 13));

    // The call, in place: x <- y, residual <- h.
    addrmsnorm::ForwardArgs call;
    call.rows = rows;
    call.hidden = hidden;
    call.x_dtype = addrmsnorm::Dtype::bfloat16;
    call.residual_dtype = addrmsnorm::Dtype::float32;
    call.weight_dtype = addrmsnorm::Dtype::bfloat16;
    call.eps = 1e-6f;

    // 1. The library's verdict on the call's arguments, before any GPU work: the check reads no
    //    memory, so the host buffers' addresses stand in for the device ones.
    call.x = call.out = x.data();
    call.residual = call.residual_out = residual.data();
    call.weight = w.data();
    addrmsnorm::Status st = addrmsnorm::fused_add_rmsnorm_check(call);
    if (!st) {
        std::printf("addrmsnorm refused the call: %s: %s\n", st.name(), st.message.c_str());
        return 1;
    }
    std::printf("addrmsnorm: the call's arguments are valid (checked on the host, cubins for %s)\n",
                addrmsnorm_built_archs());
    // 2. The library's view of the GPU: without a driver or a device it says so, here.
    st = addrmsnorm::use_primary_context(0);
    if (!st) {
        std::printf("addrmsnorm cannot run here: %s: %s\n", st.name(), st.message.c_str());
        return 1;
    }

    void *dx, *dr, *dw;
    if (cudaMalloc(&dx, x.size() * 2) != cudaSuccess || cudaMalloc(&dr, residual.size() * 4) != cudaSuccess ||
        cudaMalloc(&dw, w.size() * 2) != cudaSuccess) {
        std::printf("cudaMalloc failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dr, residual.data(), residual.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice);

    cudaStream_t stream;
    cudaStreamCreate(&stream);
    call.x = call.out = dx;
    call.residual = call.residual_out = dr;
    call.weight = dw;
    st = addrmsnorm::fused_add_rmsnorm(call, stream);
    if (!st) {
        std::printf("addrmsnorm failed: %s: %s\n", st.name(), st.message.c_str());
        return 1;
    }
    cudaStreamSynchronize(stream);

    std::vector<uint16_t> y(x.size());
    std::vector<float> h(residual.size());
    cudaMemcpy(y.data(), dx, y.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(h.data(), dr, h.size() * 4, cudaMemcpyDeviceToHost);

    // Check row 0 against the contract on the host.
    double ss = 0, worst = 0;
    for (int64_t j = 0; j < hidden; ++j) {
        const float hj = from_bf16(x[j]) + residual[j];
        if (hj != h[j]) { std::printf("residual_out[%lld] differs\n", static_cast<long long>(j)); return 1; }
        ss += static_cast<double>(hj) * hj;
    }
    const double rstd = 1.0 / std::sqrt(ss / hidden + 1e-6);
    for (int64_t j = 0; j < hidden; ++j) {
        const double ref = h[j] * rstd * from_bf16(w[j]);
        worst = std::fmax(worst, std::fabs(from_bf16(y[j]) - ref) / (std::fabs(ref) + 1e-6));
    }
    std::printf("addrmsnorm example: %lld x %lld, bf16 x with an fp32 residual stream, in place\n",
                static_cast<long long>(rows), static_cast<long long>(hidden));
    std::printf("row 0: residual_out exact, worst relative error of y %.2e (bf16 half ulp: 3.9e-03)\n", worst);
    cudaFree(dx);
    cudaFree(dr);
    cudaFree(dw);
    return worst <= 1.0 / 128 ? 0 : 1;
}
