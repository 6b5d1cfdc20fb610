// Run with ADDRMSNORM_LIBCUDA pointing nowhere (ctest sets it): every call that needs the driver
// returns ADDRMSNORM_ERROR_NO_DRIVER with a message saying why; validation still comes first.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "addrmsnorm/addrmsnorm.h"

TEST(NoDriver, LaunchSaysNoDriver) {
    const uintptr_t b = 0x10000000u;
    const addrmsnorm_status st = addrmsnorm_fused_add_rmsnorm(
        (void*)b, (void*)(2 * b), (void*)(3 * b), (void*)(4 * b), (void*)(5 * b), nullptr, 4, 128, 128, 128, 128,
        128, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0, nullptr);
    EXPECT_EQ(st, ADDRMSNORM_ERROR_NO_DRIVER);
    const std::string msg = addrmsnorm_last_error();
    EXPECT_STREQ(addrmsnorm_status_string(st), "no CUDA driver");
    // The message says why, without the status's words: printed as "status: message" (the guide), the
    // prefix appears once.
    EXPECT_EQ(msg.find("no CUDA driver"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dlopen(\"/nonexistent/libcuda.so.1\") failed"), std::string::npos) << msg;
}

TEST(NoDriver, PreloadSaysNoDriver) {
    EXPECT_EQ(addrmsnorm_preload(), ADDRMSNORM_ERROR_NO_DRIVER);
}

TEST(NoDriver, BadArgumentsAreStillInvalidFirst) {
    EXPECT_EQ(addrmsnorm_fused_add_rmsnorm(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 128, 128, 128,
                                           128, 128, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16,
                                           ADDRMSNORM_BFLOAT16, 0.0f, 0.0f, 0, nullptr),
              ADDRMSNORM_ERROR_INVALID_ARGUMENT);
}

TEST(NoDriver, EmptyCallIsANoOpWithoutTheDriver) {
    EXPECT_EQ(addrmsnorm_fused_add_rmsnorm(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 128, 128, 128,
                                           128, 128, ADDRMSNORM_BFLOAT16, ADDRMSNORM_BFLOAT16,
                                           ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0, nullptr),
              ADDRMSNORM_SUCCESS);
}
