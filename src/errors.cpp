#include "errors.h"

#include <cstdarg>
#include <cstdio>

namespace addrmsnorm {
namespace detail {
namespace {
thread_local char t_last_error[512] = "";
}  // namespace

addrmsnorm_status fail(addrmsnorm_status status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(t_last_error, sizeof(t_last_error), fmt, ap);
    va_end(ap);
    return status;
}

}  // namespace detail
}  // namespace addrmsnorm

extern "C" ADDRMSNORM_API const char* addrmsnorm_last_error(void) {
    return addrmsnorm::detail::t_last_error;
}

extern "C" ADDRMSNORM_API const char* addrmsnorm_status_string(addrmsnorm_status status) {
    switch (status) {
        case ADDRMSNORM_SUCCESS: return "success";
        case ADDRMSNORM_ERROR_INVALID_ARGUMENT: return "invalid argument";
        case ADDRMSNORM_ERROR_UNSUPPORTED_DTYPE: return "unsupported dtype";
        case ADDRMSNORM_ERROR_NO_DRIVER: return "no CUDA driver";
        case ADDRMSNORM_ERROR_NO_CONTEXT: return "no current CUDA context";
        case ADDRMSNORM_ERROR_UNSUPPORTED_ARCH: return "unsupported GPU architecture";
        case ADDRMSNORM_ERROR_CUDA: return "CUDA driver error";
    }
    return "unknown status";
}
