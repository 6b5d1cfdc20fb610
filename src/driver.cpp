#include "driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "errors.h"

namespace addrmsnorm {
namespace detail {
namespace {

struct Loaded {
    Driver driver;
    bool ok = false;
    char error[400] = "";
};

Loaded& load_once() {
    static Loaded loaded;
    static std::once_flag once;
    std::call_once(once, [] {
        const char* path = std::getenv("ADDRMSNORM_LIBCUDA");
        if (path == nullptr || path[0] == '\0') path = "libcuda.so.1";
        void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) {
            const char* why = dlerror();
            std::snprintf(loaded.error, sizeof(loaded.error),
                          "dlopen(\"%s\") failed: %s", path, why ? why : "unknown");
            return;
        }
        Driver& d = loaded.driver;
#define ADDRMSNORM_RESOLVE(name)                                                                    \
    d.name = reinterpret_cast<decltype(d.name)>(dlsym(lib, #name));                                 \
    if (d.name == nullptr) {                                                                        \
        std::snprintf(loaded.error, sizeof(loaded.error),                                           \
                      "%s has no symbol %s (the driver is too old; CUDA 12.0+ is "  \
                      "needed)", path, #name);                                                      \
        return;                                                                                     \
    }
        ADDRMSNORM_DRIVER_FUNCTIONS(ADDRMSNORM_RESOLVE)
#undef ADDRMSNORM_RESOLVE
        d.cuCtxGetId = reinterpret_cast<decltype(d.cuCtxGetId)>(dlsym(lib, "cuCtxGetId"));
        CUresult r = d.cuInit(0);
        if (r != CUDA_SUCCESS) {
            const char* s = nullptr;
            d.cuGetErrorString(r, &s);
            std::snprintf(loaded.error, sizeof(loaded.error), "cuInit failed: %s (%d)",
                          s ? s : "unknown error", static_cast<int>(r));
            return;
        }
        loaded.ok = true;
    });
    return loaded;
}

}  // namespace

const Driver* driver(addrmsnorm_status* status) {
    Loaded& l = load_once();
    if (!l.ok) {
        *status = fail(ADDRMSNORM_ERROR_NO_DRIVER, "%s", l.error);
        return nullptr;
    }
    *status = ADDRMSNORM_SUCCESS;
    return &l.driver;
}

addrmsnorm_status cuda_fail(const Driver& d, CUresult r, const char* what) {
    const char* name = nullptr;
    const char* desc = nullptr;
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &desc);
    return fail(ADDRMSNORM_ERROR_CUDA, "%s failed: %s (%s)", what, desc ? desc : "unknown error",
                name ? name : "?");
}

}  // namespace detail
}  // namespace addrmsnorm
