// The thread-local last-error message, and the one helper that sets it.
#pragma once

#include "addrmsnorm/addrmsnorm.h"

namespace addrmsnorm {
namespace detail {

// Record `fmt` (printf-style) as this thread's last error and return `status`.
addrmsnorm_status fail(addrmsnorm_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace detail
}  // namespace addrmsnorm
