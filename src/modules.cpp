#include "modules.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "errors.h"

namespace addrmsnorm {
namespace detail {
namespace {

struct ContextState {
    unsigned long long key = 0;  // cuCtxGetId where the driver has it, else the context's address
    int arch_index = -1;         // into kArchs
    int sm_count = 0;            // the device's streaming multiprocessors
    std::unique_ptr<std::atomic<CUfunction>[]> functions;
    std::mutex load_mutex;
};

std::mutex g_states_mutex;
std::vector<std::unique_ptr<ContextState>> g_states;  // never shrinks: states live as long as the process
thread_local ContextState* t_last_state = nullptr;

addrmsnorm_status context_key(const Driver& d, unsigned long long* key) {
    CUcontext ctx = nullptr;
    CUresult r = d.cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuCtxGetCurrent");
    if (ctx == nullptr)
        return fail(ADDRMSNORM_ERROR_NO_CONTEXT,
                    "no CUDA context is current on this thread: make one current first (with the CUDA "
                    "runtime, cudaSetDevice or any runtime call; with the driver, cuCtxSetCurrent)");
    if (d.cuCtxGetId != nullptr) {
        r = d.cuCtxGetId(ctx, key);
        if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuCtxGetId");
    } else {
        *key = reinterpret_cast<unsigned long long>(ctx);
    }
    return ADDRMSNORM_SUCCESS;
}

// The newest built arch the device can run: same major version, minor <= the device's.
addrmsnorm_status pick_arch(const Driver& d, int* arch_index, int* sm_count) {
    CUdevice dev;
    CUresult r = d.cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuCtxGetDevice");
    r = d.cuDeviceGetAttribute(sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    int major = 0, minor = 0;
    if ((r = d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) != CUDA_SUCCESS ||
        (r = d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) != CUDA_SUCCESS)
        return cuda_fail(d, r, "cuDeviceGetAttribute(compute capability)");
    const int cc = major * 10 + minor;
    int best = -1;
    for (int i = 0; i < kNumArchs; ++i)
        if (kArchs[i] / 10 == major && kArchs[i] <= cc && (best < 0 || kArchs[i] > kArchs[best])) best = i;
    if (best < 0)
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_ARCH,
                    "no cubin for this GPU's compute capability %d.%d (sm_%d); this library was built for %s "
                    "(rebuild with -DADDRMSNORM_CUDA_ARCHS including %d)",
                    major, minor, cc, kArchList, cc);
    *arch_index = best;
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status current_state(const Driver& d, ContextState** out) {
    unsigned long long key = 0;
    addrmsnorm_status st = context_key(d, &key);
    if (st != ADDRMSNORM_SUCCESS) return st;
    if (t_last_state != nullptr && t_last_state->key == key) {
        *out = t_last_state;
        return ADDRMSNORM_SUCCESS;
    }
    std::lock_guard<std::mutex> lock(g_states_mutex);
    for (auto& s : g_states)
        if (s->key == key) {
            *out = t_last_state = s.get();
            return ADDRMSNORM_SUCCESS;
        }
    int arch_index = -1, sm_count = 0;
    st = pick_arch(d, &arch_index, &sm_count);
    if (st != ADDRMSNORM_SUCCESS) return st;
    auto s = std::make_unique<ContextState>();
    s->key = key;
    s->arch_index = arch_index;
    s->sm_count = sm_count;
    s->functions.reset(new std::atomic<CUfunction>[kNumVariants]);
    for (int i = 0; i < kNumVariants; ++i) s->functions[i].store(nullptr, std::memory_order_relaxed);
    *out = t_last_state = s.get();
    g_states.push_back(std::move(s));
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status load(const Driver& d, ContextState& s, int variant, CUfunction* fn) {
    std::lock_guard<std::mutex> lock(s.load_mutex);
    CUfunction f = s.functions[variant].load(std::memory_order_acquire);
    if (f != nullptr) {
        *fn = f;
        return ADDRMSNORM_SUCCESS;
    }
    const CubinImage& img = kImages[variant * kNumArchs + s.arch_index];
    if (img.size == 0)  // the one kind of kernel an arch lacks: configs.quant_built_for
        return fail(ADDRMSNORM_ERROR_UNSUPPORTED_ARCH,
                    "float8_e4m3fn outputs and the block-scaled formats (NVFP4, MXFP8, MXFP4: e4m3 values or scales) need "
                    "a GPU of compute capability 8.9 or newer; this one runs sm_%d kernels",
                    kArchs[s.arch_index]);
    if (img.global_scratch_size != 0 || img.profile_scratch_size != 0)
        return fail(ADDRMSNORM_ERROR_CUDA, "kernel %d needs scratch memory, which this runtime does not allocate",
                    variant);
    // Unpacked once per kernel and context, at its first load; the driver copies the image.
    std::vector<unsigned char> cubin;
    cubin.reserve(img.size);
    for (const unsigned char *p = addrmsnorm_cubin_blob + img.offset, *end = p + img.packed_size; p < end;) {
        if (*p != 0) {
            cubin.push_back(*p++);
        } else {
            cubin.insert(cubin.end(), static_cast<size_t>(p[1]) + 1, 0);
            p += 2;
        }
    }
    if (cubin.size() != img.size)
        return fail(ADDRMSNORM_ERROR_CUDA, "kernel %d: its embedded cubin unpacks to %zu bytes, not %u", variant,
                    cubin.size(), img.size);
    CUmodule module = nullptr;
    CUresult r = d.cuModuleLoadData(&module, cubin.data());
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuModuleLoadData");
    r = d.cuModuleGetFunction(&f, module, img.name);
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuModuleGetFunction");
    if (img.shared > 48 * 1024) {  // above 48 KB a kernel must opt in to dynamic shared memory
        r = d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(img.shared));
        if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    s.functions[variant].store(f, std::memory_order_release);
    *fn = f;
    return ADDRMSNORM_SUCCESS;
}

}  // namespace

addrmsnorm_status built_kernel(int variant, const char* what) {
    if (variant < 0) return fail(ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "no %s was built for these dtypes", what);
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status get_built_kernel(const Driver& d, int variant, const char* what, LoadedKernel* out) {
    if (addrmsnorm_status st = built_kernel(variant, what); st != ADDRMSNORM_SUCCESS) return st;
    return get_kernel(d, variant, out);
}

addrmsnorm_status get_kernel(const Driver& d, int variant, LoadedKernel* out) {
    ContextState* s = nullptr;
    addrmsnorm_status st = current_state(d, &s);
    if (st != ADDRMSNORM_SUCCESS) return st;
    CUfunction f = s->functions[variant].load(std::memory_order_acquire);
    if (f == nullptr) {
        st = load(d, *s, variant, &f);
        if (st != ADDRMSNORM_SUCCESS) return st;
    }
    out->function = f;
    out->image = &kImages[variant * kNumArchs + s->arch_index];
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status current_sm_count(const Driver& d, int* sm_count) {
    ContextState* s = nullptr;
    addrmsnorm_status st = current_state(d, &s);
    if (st != ADDRMSNORM_SUCCESS) return st;
    *sm_count = s->sm_count;
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status preload_all(const Driver& d) {
    ContextState* s = nullptr;
    addrmsnorm_status st = current_state(d, &s);
    if (st != ADDRMSNORM_SUCCESS) return st;
    for (int v = 0; v < kNumVariants; ++v) {
        if (s->functions[v].load(std::memory_order_acquire) != nullptr) continue;
        if (kImages[v * kNumArchs + s->arch_index].size == 0) continue;  // not built for this arch
        CUfunction f;
        st = load(d, *s, v, &f);
        if (st != ADDRMSNORM_SUCCESS) return st;
    }
    return ADDRMSNORM_SUCCESS;
}

addrmsnorm_status launch(const Driver& d, const LoadedKernel& k, unsigned grid, void** params, addrmsnorm_stream stream,
                         bool pdl, unsigned grid_y) {
    CUlaunchConfig lc = {};
    lc.gridDimX = grid;
    lc.gridDimY = grid_y;
    lc.gridDimZ = 1;
    lc.blockDimX = static_cast<unsigned>(32 * k.image->num_warps);
    lc.blockDimY = lc.blockDimZ = 1;
    lc.sharedMemBytes = k.image->shared;
    lc.hStream = reinterpret_cast<CUstream>(stream);
    CUlaunchAttribute pdl_attr = {};
    pdl_attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl_attr.value.programmaticStreamSerializationAllowed = 1;
    const bool with_pdl = pdl && k.image->grid_dependency;
    lc.attrs = with_pdl ? &pdl_attr : nullptr;
    lc.numAttrs = with_pdl ? 1 : 0;
    const CUresult r = d.cuLaunchKernelEx(&lc, k.function, params, nullptr);
    if (r != CUDA_SUCCESS) return cuda_fail(d, r, "cuLaunchKernelEx");
    return ADDRMSNORM_SUCCESS;
}

}  // namespace detail
}  // namespace addrmsnorm
