/* vector_exp_max: 3 parameters, see spec/c_abi.md */
int32_t refcomp_vector_exp_max(float* restrict A, float* restrict B, int64_t rc_arg_n) {
    (void)A;
    (void)B;
    (void)rc_arg_n;
    const int32_t n = (int32_t)rc_arg_n;
    for (int32_t i = 0; i < n; ++i) {
        rc_vstore_float32x8(&B[(i * 16)], rc_vmax_f32x8(rc_vexp_f32x8(rc_vload_float32x8(&A[(i * 16)])), rc_vload_float32x8(&A[(i * 16)])));
        rc_vstore_float32x8(&B[((i * 16) + (1 * 8))], rc_vmax_f32x8(rc_vexp_f32x8(rc_vload_float32x8(&A[((i * 16) + (1 * 8))])), rc_vload_float32x8(&A[((i * 16) + (1 * 8))])));
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
