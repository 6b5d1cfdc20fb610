/* Compiled as strict C99 by the test build: the public header must stay valid C. */
#include "addrmsnorm/addrmsnorm.h"

const char *addrmsnorm_c99_check(void) {
    addrmsnorm_status s = addrmsnorm_fused_add_rmsnorm_check(0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1,
                                                             ADDRMSNORM_BFLOAT16, ADDRMSNORM_FLOAT32,
                                                             ADDRMSNORM_BFLOAT16, 1e-6f, 0.0f, 0u);
    return addrmsnorm_status_string(s);
}
