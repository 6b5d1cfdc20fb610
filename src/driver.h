// The CUDA driver, opened lazily with dlopen: the library links neither libcuda nor libcudart.
#pragma once

#include <cuda.h>

#include "addrmsnorm/addrmsnorm.h"

namespace addrmsnorm {
namespace detail {

// Every driver entry point the library (and its tests and benchmark) use. Names are the exported
// symbols, with their ABI version suffix where the driver has one.
#define ADDRMSNORM_DRIVER_FUNCTIONS(X) \
    X(cuInit)                          \
    X(cuGetErrorString)                \
    X(cuGetErrorName)                  \
    X(cuDriverGetVersion)              \
    X(cuDeviceGet)                     \
    X(cuDeviceGetCount)                \
    X(cuDeviceGetAttribute)            \
    X(cuDeviceGetName)                 \
    X(cuDevicePrimaryCtxRetain)        \
    X(cuCtxGetCurrent)                 \
    X(cuCtxSetCurrent)                 \
    X(cuCtxGetDevice)                  \
    X(cuCtxSynchronize)                \
    X(cuModuleLoadData)                \
    X(cuModuleGetFunction)             \
    X(cuFuncSetAttribute)              \
    X(cuLaunchKernel)                  \
    X(cuLaunchKernelEx)                \
    X(cuMemAlloc_v2)                   \
    X(cuMemFree_v2)                    \
    X(cuMemcpyHtoD_v2)                 \
    X(cuMemcpyDtoH_v2)                 \
    X(cuMemcpyDtoDAsync_v2)            \
    X(cuMemsetD8Async)                 \
    X(cuStreamCreate)                  \
    X(cuStreamDestroy_v2)              \
    X(cuStreamSynchronize)             \
    X(cuStreamBeginCapture_v2)         \
    X(cuStreamEndCapture)              \
    X(cuGraphInstantiateWithFlags)     \
    X(cuGraphLaunch)                   \
    X(cuGraphExecDestroy)              \
    X(cuGraphDestroy)                  \
    X(cuEventCreate)                   \
    X(cuEventRecord)                   \
    X(cuEventSynchronize)              \
    X(cuEventElapsedTime)              \
    X(cuEventDestroy_v2)

struct Driver {
#define ADDRMSNORM_DECLARE(name) decltype(&::name) name = nullptr;
    ADDRMSNORM_DRIVER_FUNCTIONS(ADDRMSNORM_DECLARE)
#undef ADDRMSNORM_DECLARE
    // Optional (CUDA 12.0+): a context id that is never reused, unlike a context's address.
    decltype(&::cuCtxGetId) cuCtxGetId = nullptr;
};

// The driver, loaded and initialized once (thread-safe). On failure returns nullptr and sets the
// last error (ADDRMSNORM_ERROR_NO_DRIVER). The library is opened from $ADDRMSNORM_LIBCUDA if set,
// else "libcuda.so.1".
const Driver* driver(addrmsnorm_status* status);

// Set the last error for a failed driver call `what` and return ADDRMSNORM_ERROR_CUDA.
addrmsnorm_status cuda_fail(const Driver& d, CUresult r, const char* what);

}  // namespace detail
}  // namespace addrmsnorm
