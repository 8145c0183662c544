/* vector_exp_max: 3 parameters, see spec/c_abi.md */
int32_t refcomp_vector_exp_max(float* restrict A, float* restrict B, int64_t rc_arg_n) {
    (void)A;
    (void)B;
    (void)rc_arg_n;
    const int32_t n = (int32_t)rc_arg_n;
    for (int32_t i = 0; i < n; ++i) {
        {
            float rc_lanes[16];
            for (int32_t rc_l = 0; rc_l < 16; ++rc_l) {
                rc_lanes[rc_l] = rc_max_f32(expf(A[((i * 16) + 1 * rc_l)]), A[((i * 16) + 1 * rc_l)]);
            }
            for (int32_t rc_l_1 = 0; rc_l_1 < 16; ++rc_l_1) {
                B[((i * 16) + 1 * rc_l_1)] = rc_lanes[rc_l_1];
            }
        }
    }
    return 0;
}

const char* refcomp_vector_exp_max_message(int32_t code) {
    switch (code) {
    case 0: return "ok";
    case 1: return "out of memory";
    default: return "unknown error code";
    }
}
