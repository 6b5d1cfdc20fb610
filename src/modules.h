// Modules per CUDA context: the cubin for the device's capability, loaded once per kernel and
// context (lazily, or all at once by addrmsnorm_preload), thread-safely.
#pragma once

#include <cuda.h>

#include "addrmsnorm/addrmsnorm.h"
#include "driver.h"
#include "errors.h"
#include "kernel_table.h"

namespace addrmsnorm {
namespace detail {

struct LoadedKernel {
    CUfunction function;
    const CubinImage* image;
};

// The kernel `variant` in the calling thread's current context, loading it if needed.
addrmsnorm_status get_kernel(const Driver& d, int variant, LoadedKernel* out);

// Whether the dispatch tables' variant index names a built kernel: -1 says that nothing was built for the
// call, ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE, "no <what> was built for these dtypes". Needs no driver: the
// check entry points (addrmsnorm_norm_check, addrmsnorm_norm_backward_check) ask it too.
addrmsnorm_status built_kernel(int variant, const char* what);

// get_kernel for a variant index from the dispatch tables, after built_kernel's check.
addrmsnorm_status get_built_kernel(const Driver& d, int variant, const char* what, LoadedKernel* out);

// The streaming multiprocessors of the current context's device (sizes the backward's grid).
addrmsnorm_status current_sm_count(const Driver& d, int* sm_count);

// Load every kernel into the current context.
addrmsnorm_status preload_all(const Driver& d);

// Launch k on `grid` programs of its warps, with its shared memory, on stream. With pdl, the launch
// allows programmatic stream serialization where the kernel waits on the previous grid (sm_90+
// images); elsewhere the flag is moot.
// grid_y > 1: the programs of each grid row y (the plain norm's second part of rows).
addrmsnorm_status launch(const Driver& d, const LoadedKernel& k, unsigned grid, void** params, addrmsnorm_stream stream,
                         bool pdl, unsigned grid_y = 1);

// launch() with a kernel's generated parameter struct (kernel_params.h), packed in the kernel's order;
// a parameter the caller did not set is refused by name, before anything is launched.
template <typename Params>
addrmsnorm_status launch_with(const Driver& d, const LoadedKernel& k, unsigned grid, Params& p, addrmsnorm_stream stream,
                              bool pdl) {
    void* params[Params::kCount];
    const char* missing = "";
    if (!p.pack(params, &missing))
        return fail(ADDRMSNORM_ERROR_INVALID_ARGUMENT, "internal error: the launch of %s does not set its parameter %s",
                    k.image->name, missing);
    return launch(d, k, grid, params, stream, pdl);
}

}  // namespace detail
}  // namespace addrmsnorm
