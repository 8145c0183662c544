"""The scalar C helpers every emitted kernel starts with: exact integer division, defined casts,
float16/bfloat16 conversions and NaN-propagating min/max.

All helpers are `static inline`, so the ones a kernel does not use cost nothing and raise no
warning.  The rules they implement are the ones spec/c_abi.md states (and the interpreter follows):

* floordiv / floormod / truncdiv / truncmod by zero give 0; INT_MIN / -1 wraps to INT_MIN.
  A signed floordiv / floormod by a constant power of two is a shift / a mask (`_pow2`).
  The `_checked` forms (used for divisors that are not a nonzero constant) also set `*zero` to
  1 on a zero divisor; the kernel tests that flag after the statement's expressions and fails
  with "integer division by zero" before the statement has any effect.
* float -> integer casts truncate toward zero, saturate at the integer's range, and map NaN to 0.
* float16 and bfloat16 conversions round to nearest, ties to even; NaN stays NaN (quiet);
  a conversion to bfloat16 rounds to float32 first (as the interpreter does).
"""
from __future__ import annotations

_SIGNED = (("i8", "int8_t", "uint8_t", "INT8_MIN", "INT8_MAX"),
           ("i16", "int16_t", "uint16_t", "INT16_MIN", "INT16_MAX"),
           ("i32", "int32_t", "uint32_t", "INT32_MIN", "INT32_MAX"),
           ("i64", "int64_t", "uint64_t", "INT64_MIN", "INT64_MAX"))
_UNSIGNED = (("u8", "uint8_t", "UINT8_MAX"), ("u16", "uint16_t", "UINT16_MAX"),
             ("u32", "uint32_t", "UINT32_MAX"), ("u64", "uint64_t", "UINT64_MAX"))

HEADER_INCLUDES = ("stdint.h", "stddef.h", "stdbool.h", "string.h", "stdlib.h", "math.h")


def _signed_division(tag: str, ctype: str, utype: str, low: str) -> str:
    # The quotient is computed with C's truncating `/` on values for which it is defined, then
    # adjusted toward -inf when the signs differ and there is a remainder.
    return f"""
static inline {ctype} rc_truncdiv_{tag}({ctype} a, {ctype} b) {{
    if (b == 0) return 0;
    if (b == -1) return ({ctype})(0u - ({utype})a);
    return ({ctype})(a / b);
}}
static inline {ctype} rc_truncmod_{tag}({ctype} a, {ctype} b) {{
    if (b == 0 || b == -1) return 0;
    return ({ctype})(a % b);
}}
static inline {ctype} rc_floordiv_{tag}({ctype} a, {ctype} b) {{
    {ctype} q = rc_truncdiv_{tag}(a, b);
    if (b != 0 && b != -1 && (a % b) != 0 && ((a < 0) != (b < 0))) q = ({ctype})(q - 1);
    return q;
}}
static inline {ctype} rc_floormod_{tag}({ctype} a, {ctype} b) {{
    {ctype} r = rc_truncmod_{tag}(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r = ({ctype})(r + b);
    return r;
}}
/* by 2^k, 0 < k < the type's width - 1 (the emitter's choice for a constant divisor): the same
   values as rc_floordiv / rc_floormod, written so that the compiler sees the shift and the mask
   (~a >> k for negative a: ~a is then non-negative, so no shift of a negative value) */
static inline {ctype} rc_floordiv_pow2_{tag}({ctype} a, int k) {{
    return a >= 0 ? ({ctype})(a >> k) : ({ctype})~(~a >> k);
}}
static inline {ctype} rc_floormod_pow2_{tag}({ctype} a, {ctype} mask) {{
    return ({ctype})(({utype})a & ({utype})mask);
}}
static inline {ctype} rc_abs_{tag}({ctype} a) {{
    return a < 0 ? ({ctype})(0u - ({utype})a) : a;
}}
static inline {ctype} rc_min_{tag}({ctype} a, {ctype} b) {{ return a < b ? a : b; }}
static inline {ctype} rc_max_{tag}({ctype} a, {ctype} b) {{ return a > b ? a : b; }}"""


def _unsigned_division(tag: str, ctype: str) -> str:
    return f"""
static inline {ctype} rc_truncdiv_{tag}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : ({ctype})(a / b); }}
static inline {ctype} rc_truncmod_{tag}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : ({ctype})(a % b); }}
static inline {ctype} rc_floordiv_{tag}({ctype} a, {ctype} b) {{ return rc_truncdiv_{tag}(a, b); }}
static inline {ctype} rc_floormod_{tag}({ctype} a, {ctype} b) {{ return rc_truncmod_{tag}(a, b); }}
static inline {ctype} rc_abs_{tag}({ctype} a) {{ return a; }}
static inline {ctype} rc_min_{tag}({ctype} a, {ctype} b) {{ return a < b ? a : b; }}
static inline {ctype} rc_max_{tag}({ctype} a, {ctype} b) {{ return a > b ? a : b; }}"""


def _checked_division(tag: str, ctype: str) -> str:
    # Branch free: the flag is a local of the statement, kept in a register once inlined.
    return "\n".join(
        f"static inline {ctype} rc_{op}_checked_{tag}({ctype} a, {ctype} b, int32_t* zero) {{ "
        f"*zero |= (b == 0); return rc_{op}_{tag}(a, b); }}"
        for op in ("truncdiv", "truncmod", "floordiv", "floormod"))


def _float_to_int(tag: str, ctype: str, low: str, high: str) -> str:
    # Compared in double, where every bound below is exact or rounds outward (2^63, 2^64).
    lower = "0.0" if low == "0" else f"(double){low}"
    return f"""
static inline {ctype} rc_f64_to_{tag}(double x) {{
    if (x != x) return 0;
    if (x <= {lower}) return {low};
    if (x >= (double){high}) return {high};
    return ({ctype})x;
}}"""


_HALF = r"""
/* Round mant (leading one at bit p) to m fraction bits under biased exponent e, which may be
   <= 0 for a subnormal result; ties go to even; overflow gives the infinity of exponent emax. */
static inline uint32_t rc_narrow_float(uint32_t sign, int32_t e, uint64_t mant, int p, int m, uint32_t emax) {
    int shift = p - m + (e <= 0 ? 1 - e : 0);
    uint64_t q = 0;
    if (shift < 64) {
        uint64_t half = (uint64_t)1 << (shift - 1);
        uint64_t rest = mant & (((uint64_t)1 << shift) - 1u);
        q = mant >> shift;
        if (rest > half || (rest == half && (q & 1u))) q += 1u;
    }
    uint32_t bits = e <= 0 ? (uint32_t)q : ((uint32_t)e << m) + (uint32_t)q - ((uint32_t)1 << m);
    if (bits >= (emax << m)) bits = emax << m;
    return sign | bits;
}
static inline uint16_t rc_f32_bits_to_f16(uint32_t x) {
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal, 2^-25 */
    int32_t e = (int32_t)(ax >> 23);
    uint64_t mant = (ax & 0x7fffffu) | 0x800000u;
    return (uint16_t)rc_narrow_float(sign, e - 112, mant, 23, 10, 31u);
}
static inline uint16_t rc_f64_to_f16(double d) {
    uint64_t x; memcpy(&x, &d, sizeof x);
    uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
    uint64_t ax = x & UINT64_C(0x7fffffffffffffff);
    if (ax > UINT64_C(0x7ff0000000000000)) return (uint16_t)(sign | 0x7e00u | (uint32_t)((ax >> 42) & 0x3ffu));
    if (ax == UINT64_C(0x7ff0000000000000)) return (uint16_t)(sign | 0x7c00u);
    if (ax < UINT64_C(0x3e60000000000000)) return (uint16_t)sign; /* < 2^-25 */
    int32_t e = (int32_t)(ax >> 52);
    uint64_t mant = (ax & UINT64_C(0xfffffffffffff)) | (UINT64_C(1) << 52);
    return (uint16_t)rc_narrow_float(sign, e - 1008, mant, 52, 10, 31u);
}
static inline float rc_f16_bits_to_float(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    uint32_t bits;
    float f;
    if (e == 0x1fu) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        f = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
        return sign ? -f : f;
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline uint16_t rc_float_to_bf16(float f) {
    uint32_t x; memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float rc_bf16_bits_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f; memcpy(&f, &bits, sizeof f);
    return f;
}
static inline uint16_t rc_float_to_f16_soft(float f) {
    uint32_t x; memcpy(&x, &f, sizeof x);
    return rc_f32_bits_to_f16(x);
}
#if defined(RC_NATIVE) && defined(__F16C__) && defined(__FLT16_MAX__)
/* gcc's _Float16 conversions use the F16C instructions and round to nearest even. */
#if defined(__AVX512FP16__)
/* With native float16 arithmetic gcc 12 at -O3 folds a conversion of a float result to _Float16
   into float16 arithmetic that skips roundings the IR asks for; the F16C builtin stays opaque. */
typedef float rc_v4sf __attribute__((vector_size(16)));
typedef short rc_v8hi __attribute__((vector_size(16)));
static inline uint16_t rc_float_to_f16(float f) {
    rc_v8hi h = __builtin_ia32_vcvtps2ph((rc_v4sf){f, 0.0f, 0.0f, 0.0f}, 0);
    return (uint16_t)h[0];
}
#else
static inline uint16_t rc_float_to_f16(float f) { _Float16 h = (_Float16)f; uint16_t b; memcpy(&b, &h, 2); return b; }
#endif
static inline float rc_f16_to_float(uint16_t b) { _Float16 h; memcpy(&h, &b, 2); return (float)h; }
#else
static inline uint16_t rc_float_to_f16(float f) { return rc_float_to_f16_soft(f); }
static inline float rc_f16_to_float(uint16_t b) { return rc_f16_bits_to_float(b); }
#endif
static inline float rc_bf16_to_float(uint16_t b) { return rc_bf16_bits_to_float(b); }
/* A float rounded to the nearest float16 / bfloat16 value, kept as float for arithmetic. */
static inline float rc_round_f16(float f) { return rc_f16_to_float(rc_float_to_f16(f)); }
static inline float rc_round_bf16(float f) { return rc_bf16_to_float(rc_float_to_bf16(f)); }
static inline float rc_round_f16_d(double d) { return rc_f16_to_float(rc_f64_to_f16(d)); }
/* Like the interpreter, a conversion to bfloat16 rounds to float32 first. */
static inline float rc_round_bf16_d(double d) { return rc_round_bf16((float)d); }
"""

_FLOAT_OPS = r"""
/* min/max that return NaN when either operand is NaN (fminf/fmaxf would drop it). */
static inline float rc_max_f32(float a, float b) { return (a != a || a > b) ? a : b; }
static inline float rc_min_f32(float a, float b) { return (a != a || a < b) ? a : b; }
static inline double rc_max_f64(double a, double b) { return (a != a || a > b) ? a : b; }
static inline double rc_min_f64(double a, double b) { return (a != a || a < b) ? a : b; }
/* sigmoid from exp(-|x|) in (0, 1]: no overflow, and full precision for large negative x. */
static inline float rc_sigmoid_f32(float x) {
    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}
static inline double rc_sigmoid_f64(double x) {
    double e = exp(-fabs(x)), r = 1.0 / (1.0 + e);
    return x >= 0.0 ? r : e * r;
}
static inline float rc_rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline double rc_rsqrt_f64(double x) { return 1.0 / sqrt(x); }
"""


def _select() -> str:
    # A Select whose operands read buffers: every operand is an argument, so evaluated before the
    # pick (the IR's Select semantics); float16/bfloat16 values are computed in float.
    types = [("b8", "bool"), ("f32", "float"), ("f64", "double")]
    types += [(tag, ctype) for tag, ctype, *_ in _SIGNED + _UNSIGNED]
    return "\n".join(f"static inline {ctype} rc_select_{tag}(bool c, {ctype} a, {ctype} b) {{ return c ? a : b; }}"
                     for tag, ctype in types)


def scalar_prelude() -> str:
    """The C text of every scalar helper, in a fixed order."""
    parts = []
    parts.append("static inline bool rc_min_b8(bool a, bool b) { return a && b; }\n"
                 "static inline bool rc_max_b8(bool a, bool b) { return a || b; }")
    for tag, ctype, utype, low, _high in _SIGNED:
        parts.append(_signed_division(tag, ctype, utype, low))
    for tag, ctype, _high in _UNSIGNED:
        parts.append(_unsigned_division(tag, ctype))
    for tag, ctype, *_ in _SIGNED + _UNSIGNED:
        parts.append(_checked_division(tag, ctype))
    for tag, ctype, _utype, low, high in _SIGNED:
        parts.append(_float_to_int(tag, ctype, low, high))
    for tag, ctype, high in _UNSIGNED:
        parts.append(_float_to_int(tag, ctype, "0", high))
    parts.append(_HALF)
    parts.append(_FLOAT_OPS)
    parts.append(_select())
    return "\n".join(p.strip("\n") for p in parts) + "\n"
