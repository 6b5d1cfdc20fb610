#include "errors.h"

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

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

// The last error in a Python caller's words: an argument not given is None there, not NULL, and the struct's fields
// that the Python operators take under other names are named as they name them.
extern "C" ADDRMSNORM_API const char* addrmsnorm_last_error_python(void) {
    static const std::pair<const char*, const char*> kFields[] = {
        {"gate_first is 1 ", "norm_before_gate is False "},
    };
    thread_local std::string msg;
    msg = addrmsnorm::detail::t_last_error;
    for (const auto& [c_words, python] : kFields)
        if (const size_t at = msg.find(c_words); at != std::string::npos) msg.replace(at, std::strlen(c_words), python);
    static const std::string kNull = "NULL";
    const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = msg.find(kNull); at != std::string::npos; at = msg.find(kNull, at + 1)) {
        const size_t end = at + kNull.size();
        if ((at == 0 || !word(msg[at - 1])) && (end == msg.size() || !word(msg[end]))) msg.replace(at, 4, "None");
    }
    return msg.c_str();
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
