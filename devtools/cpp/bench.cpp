// addrmsnorm-bench: the C++ runtime's bandwidth and launch cost, with no Python.
//
// For each shape: µs per call (median, min, max of 15 CUDA-graph replays), GB/s by the byte model
// of docs/report.md, and the percent of a copy roofline measured in the same run (the
// larger of a device-to-device memcpy and a two-read-two-write copy kernel). Each graph rotates
// through enough distinct buffer sets that one replay moves more than 4x the L2: cold L2 by rotation.
// Then the quantized outputs (static, per token, per group of 128) at a few shapes. Then the CPU
// cost of one eager call: 1,000 calls at N=1, H=4096, one synchronize at the end,
// against a bare cuLaunchKernel of an empty kernel measured the same way.
//
//     addrmsnorm-bench [NxH ...]
//     addrmsnorm-bench --overhead      only the launch cost, plus a line for scripts:
//                                      "overhead_us api=<µs> bare=<µs>"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "addrmsnorm/addrmsnorm.h"
#include "driver.h"

using addrmsnorm::detail::Driver;

namespace {

const Driver* D = nullptr;

#define CHECK_CU(call)                                                                  \
    do {                                                                                \
        CUresult r_ = (call);                                                           \
        if (r_ != CUDA_SUCCESS) {                                                       \
            const char* s_ = nullptr;                                                   \
            D->cuGetErrorString(r_, &s_);                                               \
            std::fprintf(stderr, "%s failed: %s\n", #call, s_ ? s_ : "?");              \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

// Written by hand in PTX so that the benchmark needs no compiler: the driver JIT-compiles it.
const char kPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64
.visible .entry addrmsnorm_bench_empty() { ret; }
.visible .entry addrmsnorm_bench_copy2(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd,
                                        .param .u64 pn)
{
    .reg .u64 %rd<14>;
    .reg .u32 %r<4>;
    .reg .b32 %v<8>;
    .reg .pred %p;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u64 %rd4, [pd];
    ld.param.u64 %rd5, [pn];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd6, %r1, %r2;
    cvt.u64.u32 %rd7, %r3;
    add.u64 %rd6, %rd6, %rd7;
    setp.ge.u64 %p, %rd6, %rd5;
    @%p bra DONE;
    shl.b64 %rd7, %rd6, 4;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    add.u64 %rd8, %rd1, %rd7;
    add.u64 %rd9, %rd2, %rd7;
    ld.global.v4.b32 {%v0, %v1, %v2, %v3}, [%rd8];
    ld.global.v4.b32 {%v4, %v5, %v6, %v7}, [%rd9];
    add.u64 %rd10, %rd3, %rd7;
    add.u64 %rd11, %rd4, %rd7;
    st.global.v4.b32 [%rd10], {%v0, %v1, %v2, %v3};
    st.global.v4.b32 [%rd11], {%v4, %v5, %v6, %v7};
DONE:
    ret;
}
)";

CUfunction g_empty, g_copy2;
CUstream g_stream;

struct Timing { double median, min, max; };

// Time `calls` launches captured in one graph; µs per launch over 15 replays.
template <class F>
Timing time_graph(int calls, F&& launch) {
    for (int i = 0; i < calls; ++i) launch(i);  // warm-up (and module loads) outside the graph
    CHECK_CU(D->cuStreamSynchronize(g_stream));
    CHECK_CU(D->cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < calls; ++i) launch(i);
    CUgraph graph;
    CHECK_CU(D->cuStreamEndCapture(g_stream, &graph));
    CUgraphExec exec;
    CHECK_CU(D->cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK_CU(D->cuGraphLaunch(exec, g_stream));
    CHECK_CU(D->cuStreamSynchronize(g_stream));
    CUevent a, b;
    CHECK_CU(D->cuEventCreate(&a, CU_EVENT_DEFAULT));
    CHECK_CU(D->cuEventCreate(&b, CU_EVENT_DEFAULT));
    std::vector<double> us;
    for (int rep = 0; rep < 15; ++rep) {
        CHECK_CU(D->cuEventRecord(a, g_stream));
        CHECK_CU(D->cuGraphLaunch(exec, g_stream));
        CHECK_CU(D->cuEventRecord(b, g_stream));
        CHECK_CU(D->cuEventSynchronize(b));
        float ms = 0;
        CHECK_CU(D->cuEventElapsedTime(&ms, a, b));
        us.push_back(1000.0 * ms / calls);
    }
    D->cuEventDestroy_v2(a);
    D->cuEventDestroy_v2(b);
    D->cuGraphExecDestroy(exec);
    D->cuGraphDestroy(graph);
    std::sort(us.begin(), us.end());
    return {us[us.size() / 2], us.front(), us.back()};
}

CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p;
    CHECK_CU(D->cuMemAlloc_v2(&p, bytes));
    CHECK_CU(D->cuMemsetD8Async(p, 0x3c, bytes, g_stream));  // finite, nonzero bf16/fp32 bit patterns
    return p;
}

double roofline(size_t total_bytes, double* memcpy_gbs, double* copy2_gbs) {
    // Four streams of total/4 bytes each for the copy kernel; one source and one target for memcpy.
    const size_t quarter = total_bytes / 4;
    CUdeviceptr a = alloc(quarter), b = alloc(quarter), c = alloc(quarter), d = alloc(quarter);
    unsigned long long n16 = quarter / 16;
    void* params[] = {&a, &b, &c, &d, &n16};
    const unsigned grid = static_cast<unsigned>((n16 + 255) / 256);
    const Timing t2 = time_graph(4, [&](int) {
        CHECK_CU(D->cuLaunchKernel(g_copy2, grid, 1, 1, 256, 1, 1, 0, g_stream, params, nullptr));
    });
    const size_t half = total_bytes / 2;
    CUdeviceptr src = alloc(half), dst = alloc(half);
    const Timing tm = time_graph(4, [&](int) { CHECK_CU(D->cuMemcpyDtoDAsync_v2(dst, src, half, g_stream)); });
    *copy2_gbs = total_bytes / t2.median / 1e3;
    *memcpy_gbs = total_bytes / tm.median / 1e3;
    for (CUdeviceptr p : {a, b, c, d, src, dst}) D->cuMemFree_v2(p);
    return std::max(*copy2_gbs, *memcpy_gbs);
}

struct Shape { long long N, H; addrmsnorm_dtype x, r; };

const char* dname(addrmsnorm_dtype d) { return d == ADDRMSNORM_FLOAT32 ? "fp32" : d == ADDRMSNORM_BFLOAT16 ? "bf16" : "fp16"; }
int esize(addrmsnorm_dtype d) { return d == ADDRMSNORM_FLOAT32 ? 4 : 2; }

}  // namespace

int main(int argc, char** argv) {
    addrmsnorm_status st;
    D = addrmsnorm::detail::driver(&st);
    if (D == nullptr) {
        std::printf("addrmsnorm-bench: %s\nNothing to measure without a GPU.\n", addrmsnorm_last_error());
        return 0;
    }
    CUdevice dev;
    CHECK_CU(D->cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK_CU(D->cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(D->cuCtxSetCurrent(ctx));
    CHECK_CU(D->cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING));
    char name[256] = "";
    D->cuDeviceGetName(name, sizeof(name), dev);
    int l2 = 0, drv = 0;
    D->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
    D->cuDriverGetVersion(&drv);
    CUmodule mod;
    CHECK_CU(D->cuModuleLoadData(&mod, kPtx));
    CHECK_CU(D->cuModuleGetFunction(&g_empty, mod, "addrmsnorm_bench_empty"));
    CHECK_CU(D->cuModuleGetFunction(&g_copy2, mod, "addrmsnorm_bench_copy2"));
    if (addrmsnorm_preload() != ADDRMSNORM_SUCCESS) {
        std::printf("addrmsnorm_preload: %s\n", addrmsnorm_last_error());
        return 1;
    }

    const bool overhead_only = argc > 1 && std::strcmp(argv[1], "--overhead") == 0;
    std::vector<Shape> shapes;
    for (int i = overhead_only ? 2 : 1; i < argc; ++i) {
        long long N = 0, H = 0;
        if (std::sscanf(argv[i], "%lldx%lld", &N, &H) == 2) shapes.push_back({N, H, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16});
    }
    if (shapes.empty()) {
        const long long grid[][2] = {{1, 4096}, {8, 8192}, {64, 4096}, {512, 4096}, {2048, 4096},
                                     {1048576, 128}, {65536, 1024}, {16384, 3000}, {16384, 4096},
                                     {16384, 4100}, {16384, 8192}, {16384, 11111}, {4096, 14336},
                                     {4096, 32768}, {2048, 65536}, {1024, 131072}};
        for (auto& g : grid) shapes.push_back({g[0], g[1], ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16});
        shapes.push_back({16384, 4096, ADDRMSNORM_BFLOAT16, ADDRMSNORM_FLOAT32});
        shapes.push_back({16384, 4096, ADDRMSNORM_FLOAT32, ADDRMSNORM_FLOAT32});
    }

    double memcpy_gbs = 0, copy2_gbs = 0;
    const double roof = overhead_only ? 0.0 : roofline(size_t(1) << 30, &memcpy_gbs, &copy2_gbs);
    if (overhead_only) shapes.clear();
    if (!overhead_only) std::printf("# addrmsnorm-bench (C++ runtime, no Python)\n\n");
    std::printf("GPU %s, driver %d.%d, L2 %d MB, built for %s\n", name, drv / 1000, (drv % 1000) / 10, l2 >> 20,
                addrmsnorm_built_archs());
    if (!overhead_only) {
        std::printf("Roofline (1 GiB moved): memcpy D2D %.0f GB/s, 2-read-2-write copy kernel %.0f GB/s -> %.0f GB/s\n",
                    memcpy_gbs, copy2_gbs, roof);
        std::printf("Timing: CUDA-graph replay, median of 15, cold L2 by rotating buffer sets (> 4x L2 per replay)\n\n");
        std::printf("| N x H | x / residual | µs median | min | max | GB/s | %% roofline |\n|---|---|---|---|---|---|---|\n");
    }
    for (const Shape& s : shapes) {
        const size_t row_bytes = static_cast<size_t>(s.H) * (2 * esize(s.x) + 2 * esize(s.r));
        const double bytes = static_cast<double>(s.N) * row_bytes + s.H * esize(s.x);
        const int sets = static_cast<int>(std::min<double>(64, std::max<double>(1, std::ceil(4.0 * l2 / bytes))));
        struct Set { CUdeviceptr x, r, o, ro; };
        std::vector<Set> bufs;
        const size_t n = static_cast<size_t>(s.N * s.H);
        for (int i = 0; i < sets; ++i)
            bufs.push_back({alloc(n * esize(s.x)), alloc(n * esize(s.r)), alloc(n * esize(s.x)), alloc(n * esize(s.r))});
        CUdeviceptr w = alloc(static_cast<size_t>(s.H) * esize(s.x));
        bool ok = true;
        const Timing t = time_graph(sets, [&](int i) {
            const Set& b = bufs[i];
            if (addrmsnorm_fused_add_rmsnorm((void*)b.x, (void*)b.r, (void*)w, (void*)b.o, (void*)b.ro, nullptr, s.N, s.H,
                                             s.H, s.H, s.H, s.H, s.x, s.r, s.x, 1e-6f, 0.f, 0,
                                             reinterpret_cast<addrmsnorm_stream>(g_stream)) != ADDRMSNORM_SUCCESS) {
                ok = false;
            }
        });
        if (!ok) {
            std::printf("| %lldx%lld | failed: %s |\n", s.N, s.H, addrmsnorm_last_error());
        } else {
            const double gbs = bytes / t.median / 1e3;
            std::printf("| %lldx%lld | %s / %s | %.2f | %.2f | %.2f | %.0f | %.1f%% |\n", s.N, s.H, dname(s.x),
                        dname(s.r), t.median, t.min, t.max, gbs, 100.0 * gbs / roof);
        }
        for (const Set& b : bufs)
            for (CUdeviceptr p : {b.x, b.r, b.o, b.ro}) D->cuMemFree_v2(p);
        D->cuMemFree_v2(w);
    }

    // Quantized outputs, bf16 in, float8_e4m3fn out (int8 on GPUs without float8): static, per token,
    // per group of 128 (column-major scales, UE8M0). Byte model: read x and residual, write h and q
    // (7 bytes per element), the weight once, the scales written.
    if (!overhead_only) {
        int major = 0, minor = 0;
        D->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        D->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        const addrmsnorm_quant_dtype qd = major * 10 + minor >= 89 ? ADDRMSNORM_QUANT_FLOAT8_E4M3 : ADDRMSNORM_QUANT_INT8;
        std::printf("\nQuantized outputs (%s), bf16 in:\n\n| mode | N x H | µs median | min | max | GB/s | %% roofline |\n"
                    "|---|---|---|---|---|---|---|\n", qd == ADDRMSNORM_QUANT_INT8 ? "int8" : "float8_e4m3fn");
        const long long qshapes[][2] = {{1, 4096}, {2048, 4096}, {16384, 4096}, {16384, 8192}, {8192, 14336}};
        for (addrmsnorm_quant_mode mode : {ADDRMSNORM_QUANT_STATIC, ADDRMSNORM_QUANT_PER_TOKEN, ADDRMSNORM_QUANT_PER_GROUP}) {
            for (auto& g : qshapes) {
                const long long N = g[0], H = g[1];
                const long long groups = mode == ADDRMSNORM_QUANT_PER_GROUP ? H / 128 : 1;
                const long long n_pad = (N + 3) / 4 * 4;
                const double bytes = 7.0 * N * H + 2.0 * H + (mode == ADDRMSNORM_QUANT_STATIC ? 4.0 : 4.0 * N * groups);
                const int sets = static_cast<int>(std::min<double>(64, std::max<double>(1, std::ceil(4.0 * l2 / bytes))));
                struct QSet { CUdeviceptr x, r, q, ro, s; };
                std::vector<QSet> bufs;
                const size_t n = static_cast<size_t>(N * H);
                for (int i = 0; i < sets; ++i)
                    bufs.push_back({alloc(n * 2), alloc(n * 2), alloc(n), alloc(n * 2), alloc(static_cast<size_t>(n_pad * groups) * 4)});
                CUdeviceptr w = alloc(static_cast<size_t>(H) * 2), scale = alloc(4);
                const float one_over_100 = 0.01f;
                CHECK_CU(D->cuMemcpyHtoD_v2(scale, &one_over_100, 4));
                bool ok = true;
                const Timing t = time_graph(sets, [&](int i) {
                    const QSet& b = bufs[i];
                    addrmsnorm_quant q{};
                    q.mode = mode;
                    q.dtype = qd;
                    q.group_size = mode == ADDRMSNORM_QUANT_PER_GROUP ? 128 : 0;
                    q.flags = mode == ADDRMSNORM_QUANT_PER_GROUP ? ADDRMSNORM_QUANT_UE8M0 : 0u;
                    q.scale = mode == ADDRMSNORM_QUANT_STATIC ? reinterpret_cast<const float*>(scale) : nullptr;
                    q.scales = mode == ADDRMSNORM_QUANT_STATIC ? nullptr : reinterpret_cast<float*>(b.s);
                    q.scales_stride_row = 1;  // per token: one per row; per group: column-major, TMA-aligned
                    q.scales_stride_group = mode == ADDRMSNORM_QUANT_PER_GROUP ? n_pad : 0;
                    if (addrmsnorm_fused_add_rmsnorm_quant((void*)b.x, (void*)b.r, (void*)w, (void*)b.q, (void*)b.ro, nullptr,
                                                           N, H, H, H, H, H, H, ADDRMSNORM_BFLOAT16, 1e-6f, 0.f, &q, 0,
                                                           reinterpret_cast<addrmsnorm_stream>(g_stream)) != ADDRMSNORM_SUCCESS)
                        ok = false;
                });
                const char* mname = mode == ADDRMSNORM_QUANT_STATIC ? "static" : mode == ADDRMSNORM_QUANT_PER_TOKEN
                                                                               ? "per token" : "per group 128";
                if (!ok) {
                    std::printf("| %s | %lldx%lld | failed: %s |\n", mname, N, H, addrmsnorm_last_error());
                } else {
                    const double gbs = bytes / t.median / 1e3;
                    std::printf("| %s | %lldx%lld | %.2f | %.2f | %.2f | %.0f | %.1f%% |\n", mname, N, H, t.median, t.min,
                                t.max, gbs, 100.0 * gbs / roof);
                }
                for (const QSet& b : bufs)
                    for (CUdeviceptr p : {b.x, b.r, b.q, b.ro, b.s}) D->cuMemFree_v2(p);
                D->cuMemFree_v2(w);
                D->cuMemFree_v2(scale);
            }
        }
    }

    // CPU cost of one eager call.
    const long long N = 1, H = 4096;
    CUdeviceptr x = alloc(H * 2), r = alloc(H * 2), o = alloc(H * 2), ro = alloc(H * 2), w = alloc(H * 2);
    auto eager = [&](auto&& call) {
        for (int i = 0; i < 100; ++i) call();
        CHECK_CU(D->cuStreamSynchronize(g_stream));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 1000; ++i) call();
        CHECK_CU(D->cuStreamSynchronize(g_stream));
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000.0;
    };
    double best_api = 1e30, best_bare = 1e30;
    for (int rep = 0; rep < 5; ++rep) {  // best of 5 rounds, alternating, to damp CPU noise
        best_api = std::min(best_api, eager([&] {
            addrmsnorm_fused_add_rmsnorm((void*)x, (void*)r, (void*)w, (void*)o, (void*)ro, nullptr, N, H, H, H, H, H,
                                         ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, 1e-6f, 0.f, 0,
                                         reinterpret_cast<addrmsnorm_stream>(g_stream));
        }));
        best_bare = std::min(best_bare, eager([&] {
            D->cuLaunchKernel(g_empty, 1, 1, 1, 32, 1, 1, 0, g_stream, nullptr, nullptr);
        }));
    }
    std::printf("\nCPU cost per eager call (1,000 calls, one sync at the end, best of 5 rounds):\n");
    std::printf("| entry point | µs per call |\n|---|---|\n");
    std::printf("| addrmsnorm_fused_add_rmsnorm, N=1 H=4096 bf16 | %.2f |\n", best_api);
    std::printf("| bare cuLaunchKernel of an empty kernel | %.2f |\n", best_bare);
    std::printf("ratio: %.2fx the bare launch\n", best_api / best_bare);
    std::printf("overhead_us api=%.3f bare=%.3f\n", best_api, best_bare);
    return 0;
}
