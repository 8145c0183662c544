/* scalar_mix: 3 parameters, see spec/c_abi.md */
int32_t refcomp_scalar_mix(uint16_t* restrict A, int32_t* restrict B, int64_t rc_arg_n) {
    (void)A;
    (void)B;
    (void)rc_arg_n;
    const int32_t n = (int32_t)rc_arg_n;
    int32_t rc_status = 0;
    if (!((n > 0))) {
        rc_status = 2;
        goto rc_exit;
    }
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; ++i) {
#pragma GCC unroll 4
        for (int32_t j = 0; j < 4; ++j) {
            B[i] = ((int32_t)((uint32_t)rc_floordiv_i32(B[i], 3) + (uint32_t)rc_f64_to_i32((double)(rc_f16_to_float(A[((((int64_t)(i)) * INT64_C(4)) + ((int64_t)(j)))])))));
        }
    }
rc_exit:
    return rc_status;
}

const char* refcomp_scalar_mix_message(int32_t code) {
    switch (code) {
    case 0: return "ok";
    case 1: return "out of memory";
    case 2: return "n must be positive";
    default: return "unknown error code";
    }
}
