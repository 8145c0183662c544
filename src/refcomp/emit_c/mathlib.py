"""Math intrinsics in C: scalar libm names, and vector versions that keep IEEE NaN/inf semantics.

Vector math never relies on -ffast-math.  Where glibc's libmvec has a vector variant (declared by
hand here: glibc only declares them under __FAST_MATH__), a vector of any length is processed in
chunks of the machine's native width; libmvec handles special inputs (inf, nan, denormals) by
falling back to the scalar routine, so the results keep libm's semantics within a few ulp.
Everything else is a lane loop over the scalar function, which gcc vectorises where it can
(sqrt, floor, ... with -fno-math-errno, which changes no value).
"""
from __future__ import annotations

from ..ast.dtype import DataType

# IR intrinsic -> C99 libm function (double version; float adds an `f`).
LIBM = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10", "log1p": "log1p",
    "expm1": "expm1", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
    "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "erf": "erf", "floor": "floor", "ceil": "ceil",
    "round": "round", "trunc": "trunc", "nearbyint": "nearbyint", "pow": "pow",
    "atan2": "atan2", "fmod": "fmod", "hypot": "hypot", "copysign": "copysign", "abs": "fabs",
}
# Intrinsics built from the ones above by a refcomp helper (rc_<name>_f32 / _f64).
COMPOSED = ("sigmoid", "rsqrt")

# libmvec variants by the glibc version that added them.
MVEC_2_22 = frozenset({"exp", "log", "sin", "cos", "pow"})
MVEC_2_35 = MVEC_2_22 | frozenset({
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "erf", "exp2", "expm1", "log10",
    "log1p", "log2", "sinh", "tan", "tanh", "atan2", "hypot",
})


def scalar_call(op: str, dtype: DataType, args: list[str]) -> str:
    """A C call computing op on scalar args of dtype (float16/bfloat16 computed in float)."""
    double = dtype.name == "float64"
    if op in COMPOSED:
        return f"rc_{op}_{'f64' if double else 'f32'}({', '.join(args)})"
    name = LIBM[op] + ("" if double else "f")
    return f"{name}({', '.join(args)})"


# Preprocessor block selecting libmvec's widest variant the compiler targets, emitted once in
# native kernels that use vector math.  The names follow the x86-64 vector function ABI:
# _ZGV<isa>N<lanes><v per argument>_<name>.
MVEC_SELECT = r"""
#if defined(__x86_64__) && defined(__AVX512F__)
#define RC_MVEC_W32 16
#define RC_MVEC_W64 8
#define RC_MVEC_BYTES 64
typedef __m512 rc_mvec_f32;
typedef __m512d rc_mvec_f64;
#define RC_MVEC1_F32(name) _ZGVeN16v_##name##f
#define RC_MVEC2_F32(name) _ZGVeN16vv_##name##f
#define RC_MVEC1_F64(name) _ZGVeN8v_##name
#define RC_MVEC2_F64(name) _ZGVeN8vv_##name
/* 32-byte vectors (e.g. float32x8 pieces of a wider store) take the AVX2 variants */
#define RC_MVEC_HALF_BYTES 32
typedef __m256 rc_mvech_f32;
typedef __m256d rc_mvech_f64;
#define RC_MVECH1_F32(name) _ZGVdN8v_##name##f
#define RC_MVECH2_F32(name) _ZGVdN8vv_##name##f
#define RC_MVECH1_F64(name) _ZGVdN4v_##name
#define RC_MVECH2_F64(name) _ZGVdN4vv_##name
#elif defined(__x86_64__) && defined(__AVX2__)
#define RC_MVEC_W32 8
#define RC_MVEC_W64 4
#define RC_MVEC_BYTES 32
typedef __m256 rc_mvec_f32;
typedef __m256d rc_mvec_f64;
#define RC_MVEC1_F32(name) _ZGVdN8v_##name##f
#define RC_MVEC2_F32(name) _ZGVdN8vv_##name##f
#define RC_MVEC1_F64(name) _ZGVdN4v_##name
#define RC_MVEC2_F64(name) _ZGVdN4vv_##name
#elif defined(__x86_64__) && defined(__SSE4_1__)
#define RC_MVEC_W32 4
#define RC_MVEC_W64 2
#define RC_MVEC_BYTES 16
typedef __m128 rc_mvec_f32;
typedef __m128d rc_mvec_f64;
#define RC_MVEC1_F32(name) _ZGVbN4v_##name##f
#define RC_MVEC2_F32(name) _ZGVbN4vv_##name##f
#define RC_MVEC1_F64(name) _ZGVbN2v_##name
#define RC_MVEC2_F64(name) _ZGVbN2vv_##name
#endif
"""


def mvec_declaration(op: str, dtype: DataType) -> str:
    """The extern declarations of libmvec's variants of op (inside #ifdef RC_MVEC_W32): the
    native width, and on AVX-512 also the 32-byte (AVX2) one."""
    tag = "F64" if dtype.element.name == "float64" else "F32"
    arity = 2 if op in ("pow", "atan2", "hypot") else 1
    lines = []
    for kind in ("", "H"):
        vtype = f"rc_mvec{kind.lower()}_{tag.lower()}"
        params = ", ".join([vtype] * arity)
        lines.append(f"extern {vtype} RC_MVEC{kind}{arity}_{tag}({LIBM[op]})({params});")
    return f"{lines[0]}\n#if defined(RC_MVEC_HALF_BYTES)\n{lines[1]}\n#endif"


def vector_math_helper(name: str, op: str, dtype: DataType, vtype: str, mvec_functions: frozenset) -> str:
    """A C function `name` applying op lane-wise to vectors of dtype (lanes > 1)."""
    lanes = dtype.lanes
    element = dtype.element
    double = element.name == "float64"
    arity = 2 if op in ("pow", "atan2", "fmod", "hypot", "copysign") else 1
    params = ", ".join(f"{vtype} {p}" for p in ("x", "y")[:arity])
    scalar_args = [f"a{p}[l]" for p in ("x", "y")[:arity]]
    ctype = "double" if double else "float"
    # through plain arrays, as vector.lane_loop (gcc 12 fails on vectors filled element by element)
    copies = "".join(f"    {ctype} a{p}[{lanes}];\n    memcpy(a{p}, &{p}, sizeof a{p});\n" for p in ("x", "y")[:arity])
    lane_loop = (f"{copies}    {ctype} z[{lanes}];\n"
                 f"    for (int l = 0; l < {lanes}; ++l) z[l] = {scalar_call(op, element, scalar_args)};\n"
                 f"    {vtype} r;\n    memcpy(&r, z, sizeof r);\n    return r;\n")
    if op not in mvec_functions:
        return f"static inline {vtype} {name}({params}) {{\n{lane_loop}}}"
    width = "RC_MVEC_W64" if double else "RC_MVEC_W32"
    tag = "F64" if double else "F32"
    mtype = f"rc_mvec_{tag.lower()}"
    size = 8 if double else 4
    loads = "".join(f"        memcpy(&c{p}, (const char*)&{p} + {size} * k, sizeof c{p});\n"
                    for p in ("x", "y")[:arity])
    call_args = ", ".join(f"c{p}" for p in ("x", "y")[:arity])
    declare = " ".join(f"{mtype} c{p};" for p in ("x", "y")[:arity])
    chunked = (f"    {vtype} r;\n"
               f"    for (int k = 0; k < {lanes}; k += {width}) {{\n"
               f"        {declare}\n{loads}"
               f"        cx = RC_MVEC{arity}_{tag}({LIBM[op]})({call_args});\n"
               f"        memcpy((char*)&r + {size} * k, &cx, sizeof cx);\n"
               f"    }}\n    return r;\n")
    return (f"static inline {vtype} {name}({params}) {{\n"
            f"#if defined({width}) && ({lanes} % {width}) == 0\n{chunked}"
            f"#else\n{lane_loop}#endif\n}}")
