"""GCC vector types and the small inline helpers the native target's vector code calls.

Helpers are created on demand and emitted in first-request order, so a kernel's source only holds
what it uses and is the same on every run.  A vector of dtype `float32x8` is `rc_f32x8`; bool
vectors are int32 masks (`rc_i32x8`, 0 or -1 per lane); float16/bfloat16 vectors compute as float
vectors rounded after each operation.  Lane loops over vector elements are written so gcc turns
them into single instructions at -O3 (broadcast, blend, convert).  A vector computed lane by lane
is filled through plain arrays (`lane_loop`), never by assigning its elements.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ..ast.dtype import DataType
from ..ast.exp_poly import FLOAT32_DEGREE, exp_steps
from . import mathlib
from .ctype import (
    float_to_half, half_to_float, is_half, short_name, storage_type, value_type, vector_bytes, vector_element_ctype,
    vector_element_tag,
)

_INT_TAGS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_UINT_CTYPE = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}
_INT_CTYPE = {1: "int8_t", 2: "int16_t", 4: "int32_t", 8: "int64_t"}
# The widest vector registers the compiler targets, in bytes.
_VBYTES = """#if defined(__AVX512F__)
#define RC_VBYTES 64
#elif defined(__AVX__)
#define RC_VBYTES 32
#else
#define RC_VBYTES 16
#endif"""


class VectorLib:
    """The typedefs and helpers one kernel's vector code needs."""

    def __init__(self, mvec_functions: frozenset = frozenset()) -> None:
        self.typedefs: dict[str, str] = {}
        self.helpers: dict[str, str] = {}
        self.mvec_functions = mvec_functions
        self.mvec_used: dict[str, str] = {}
        self.needs_intrinsics = False  # <immintrin.h> (streaming stores)

    # ------------------------------------------------------------------ types
    def vtype(self, dtype: DataType) -> str:
        """The vector type of dtype (lanes > 1), declared on first use."""
        name = f"rc_{vector_element_tag(dtype)}x{dtype.lanes}"
        if name not in self.typedefs:
            element = vector_element_ctype(dtype)
            self.typedefs[name] = (f"typedef {element} {name} "
                                   f"__attribute__((vector_size({vector_bytes(dtype)})));")
        return name

    def split_branches(self, macro: str, args: list[tuple[str, DataType]], result: DataType,
                       chunk_expr) -> list[tuple[str, str]]:
        """Preprocessor branches computing a wide vector op in chunks of `macro` bytes.

        Each branch splits the arguments with __builtin_shufflevector (register moves, no
        stack round trips), applies chunk_expr(chunk_lanes, chunk_arg_names) to each chunk and
        joins the results.  Returns (condition, body) pairs for chunk sizes below the total.
        """
        lanes = result.lanes
        width = max(self.element_width(dt) for _, dt in args)
        total = lanes * width
        branches = []
        for chunk_bytes in (64, 32, 16):
            clanes = chunk_bytes // width
            if chunk_bytes >= total or clanes < 1 or lanes % clanes:
                continue
            count = lanes // clanes
            lines = []
            for name, dt in args:
                ct = self.vtype(dt.with_lanes(clanes))
                for k in range(count):
                    index = ", ".join(str(k * clanes + j) for j in range(clanes))
                    lines.append(f"{ct} {name}{k} = __builtin_shufflevector({name}, {name}, {index});")
            rt = self.vtype(result.with_lanes(clanes))
            for k in range(count):
                lines.append(f"{rt} r{k} = {chunk_expr(clanes, [f'{name}{k}' for name, _ in args])};")
            level, size, serial = [f"r{k}" for k in range(count)], clanes, 0
            while len(level) > 1:
                joined = []
                jt = self.vtype(result.with_lanes(size * 2))
                for a, b in zip(level[::2], level[1::2]):
                    index = ", ".join(str(j) for j in range(2 * size))
                    lines.append(f"{jt} j{serial} = __builtin_shufflevector({a}, {b}, {index});")
                    joined.append(f"j{serial}")
                    serial += 1
                level, size = joined, size * 2
            lines.append(f"return {level[0]};")
            branches.append((f"{macro} == {chunk_bytes}", "".join(f"    {line}\n" for line in lines)))
        return branches

    def compare(self, op: str, operand: DataType) -> str:
        """rc_vcmp_<op>_T(a, b): a lane mask as wide as the operands' lanes (0 or -1).

        gcc scalarises comparisons of vectors wider than the hardware's registers (it splits
        arithmetic fine), so wide vectors are compared in RC_VBYTES chunks.
        """
        names = _COMPARE_NAMES
        vt = self.vtype(operand)
        width = self.element_width(operand)
        it = self.int_vtype(width, operand.lanes)
        name = f"rc_vcmp_{names[op]}_{vt[3:]}"
        if name in self.helpers:
            return name
        mask_type = DataType(f"int{8 * width}", operand.lanes)
        branches = self.split_branches(
            "RC_VBYTES", [("a", operand), ("b", operand)], mask_type,
            lambda clanes, names: f"({self.vtype(mask_type.with_lanes(clanes))})({names[0]} {op} {names[1]})")
        return self._add(name, _with_branches(
            f"static inline {it} {name}({vt} a, {vt} b)", branches, f"    return ({it})(a {op} b);\n"))

    def mask(self, lanes: int) -> str:
        return self.vtype(DataType("bool", lanes))

    def uint_vtype(self, width: int, lanes: int) -> str:
        """An unsigned integer vector with `width`-byte lanes (for bitwise selects)."""
        name = f"rc_u{8 * width}x{lanes}"
        if name not in self.typedefs:
            self.typedefs[name] = (f"typedef {_UINT_CTYPE[width]} {name} "
                                   f"__attribute__((vector_size({width * lanes})));")
        return name

    def int_vtype(self, width: int, lanes: int) -> str:
        name = f"rc_{_INT_TAGS[width]}x{lanes}"
        if name not in self.typedefs:
            self.typedefs[name] = (f"typedef {_INT_CTYPE[width]} {name} "
                                   f"__attribute__((vector_size({width * lanes})));")
        return name

    @staticmethod
    def element_width(dtype: DataType) -> int:
        return 4 if dtype.is_bool or is_half(dtype) else dtype.element.bytes

    def _add(self, name: str, text: str) -> str:
        if name not in self.helpers:
            self.helpers[name] = text
        return name

    # ------------------------------------------------------------------ construction
    def broadcast(self, dtype: DataType) -> str:
        vt = self.vtype(dtype)
        arg = "int32_t" if dtype.is_bool else value_type(dtype.element)
        value = "(x ? -1 : 0)" if dtype.is_bool else "x"
        # every lane initialised with the value (not zeros + value: 0.0f + x is not x for x = -0.0f,
        # so the compiler would keep a scalar add before each broadcast)
        lanes = ", ".join(["v"] * dtype.lanes)
        # a bool mask shares its vector type with an integer vector: its own name keeps the two apart
        name = f"rc_bcast_{'mask_' if dtype.is_bool else ''}{vt[3:]}"
        return self._add(name, (
            f"static inline {vt} {name}({arg} x) {{\n"
            f"    const {vector_element_ctype(dtype)} v = ({vector_element_ctype(dtype)}){value};\n"
            f"    {vt} r = {{{lanes}}};\n    return r;\n}}"))

    def ramp(self, dtype: DataType) -> str:
        vt = self.vtype(dtype)
        ctype = value_type(dtype.element)
        ut = self.uint_vtype(dtype.element.bytes, dtype.lanes)
        uel = _UINT_CTYPE[dtype.element.bytes]
        steps = ", ".join(str(k) for k in range(dtype.lanes))
        return self._add(f"rc_ramp_{vt[3:]}", (
            f"static inline {vt} rc_ramp_{vt[3:]}({ctype} base, {ctype} stride) {{\n"
            f"    {ut} steps = {{{steps}}};\n"
            f"    {ut} zero = {{0}};\n"
            f"    return ({vt})((zero + ({uel})base) + (zero + ({uel})stride) * steps);\n}}"))

    # ------------------------------------------------------------------ memory
    def _from_storage(self, dtype: DataType, expr: str) -> str:
        element = dtype.element
        if element.is_bool:
            return f"({expr} ? -1 : 0)"
        return half_to_float(element, expr)

    def _to_storage(self, dtype: DataType, expr: str) -> str:
        element = dtype.element
        if element.is_bool:
            return f"(uint8_t)({expr} != 0)"
        return float_to_half(element, expr)

    def load(self, dtype: DataType) -> str:
        """rc_vload_...(const T* p): lanes consecutive elements from p (no alignment needed)."""
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        name = f"rc_vload_{dtype.element.name}x{dtype.lanes}"
        if is_half(dtype) or dtype.is_bool:
            body = lane_loop(vt, vector_element_ctype(dtype), dtype.lanes, self._from_storage(dtype, "p[l]"))
            if dtype.element.name == "float16" and dtype.lanes % 8 == 0:
                body = self._f16c_load(vt, dtype.lanes, body)
            if dtype.element.name == "bfloat16" and dtype.lanes >= 2:
                body = self._bf16_load(vt, dtype.lanes, body)
        else:
            body = f"    {vt} r;\n    memcpy(&r, p, sizeof r);\n    return r;\n"
        return self._add(name, f"static inline {vt} {name}(const {st}* p) {{\n{body}}}")

    def _f16c_load(self, vt: str, lanes: int, fallback: str) -> str:
        """float16 lanes to float32 by the x86 conversion instructions (exact, as the lane loop),
        16 at a time with AVX-512, else 8 at a time with F16C; the lane loop elsewhere."""
        return self._widening_load(
            vt, lanes, fallback, "__F16C__",
            "        _mm512_storeu_ps(z + c, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(const void*)(p + c))));\n",
            "        _mm256_storeu_ps(z + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(p + c))));\n")

    def _bf16_load(self, vt: str, lanes: int, fallback: str) -> str:
        """bfloat16 lanes to float32: the 16-bit patterns zero-extended to 32-bit lanes and shifted
        into their high halves (exact, the lane loop's shift), as vector operations that stay in
        registers (a widening into memory and a reload of the floats would stall the reload
        behind the stores); `fallback` (the lane loop) where GCC vector extensions are missing."""
        u16, u32 = self.uint_vtype(2, lanes), self.uint_vtype(4, lanes)
        return (
            "#if defined(__GNUC__) && !defined(__CUDACC__)\n"
            f"    {u16} h;\n    memcpy(&h, p, sizeof h);\n"
            f"    return ({vt})(__builtin_convertvector(h, {u32}) << 16);\n"
            f"#else\n{fallback}#endif\n")

    def _widening_load(self, vt: str, lanes: int, fallback: str, feature: str, widen16: str, widen8: str) -> str:
        """The body of a 16-bit-to-float32 vector load on x86 where the build is native and has
        `feature`: 16 lanes at a time by `widen16` with AVX-512 (when 16 divides the lanes), else
        8 at a time by `widen8`, through a float array; `fallback` (the lane loop) elsewhere."""
        self.needs_intrinsics = True
        return (
            f"#if defined(RC_NATIVE) && defined(__x86_64__) && defined({feature})\n"
            f"    float z[{lanes}];\n"
            "#if defined(__AVX512F__)" + (" && 0" if lanes % 16 else "") + "\n"
            f"    for (int c = 0; c < {lanes}; c += 16)\n" + widen16 +
            "#else\n"
            f"    for (int c = 0; c < {lanes}; c += 8)\n" + widen8 +
            "#endif\n"
            f"    {vt} r;\n    memcpy(&r, z, sizeof r);\n    return r;\n"
            f"#else\n{fallback}#endif\n")

    def store(self, dtype: DataType) -> str:
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        name = f"rc_vstore_{dtype.element.name}x{dtype.lanes}"
        if is_half(dtype) or dtype.is_bool:
            body = (f"    for (int l = 0; l < {dtype.lanes}; ++l) "
                    f"p[l] = {self._to_storage(dtype, 'v[l]')};\n")
        else:
            body = "    memcpy(p, &v, sizeof v);\n"
        return self._add(name, f"static inline void {name}({st}* p, {vt} v) {{\n{body}}}")

    def stream(self, dtype: DataType) -> str | None:
        """rc_vstream_...(T* p, v): a non-temporal (cache-bypassing) store; p must be aligned to
        the vector's size.  None for element types stored through conversions."""
        if is_half(dtype) or dtype.is_bool:
            return None
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        size = self.element_width(dtype) * dtype.lanes
        intrinsic = {16: ("__SSE2__", "_mm_stream_si128", "__m128i"),
                     32: ("__AVX__", "_mm256_stream_si256", "__m256i"),
                     64: ("__AVX512F__", "_mm512_stream_si512", "__m512i")}.get(size)
        if intrinsic is None:
            return None
        feature, function, itype = intrinsic
        self.needs_intrinsics = True
        name = f"rc_vstream_{dtype.element.name}x{dtype.lanes}"
        return self._add(name, (
            f"static inline void {name}({st}* p, {vt} v) {{\n"
            f"#if defined(__x86_64__) && defined({feature})\n"
            f"    {function}(({itype}*)(void*)p, ({itype})v);\n"
            f"#else\n    memcpy(p, &v, sizeof v);\n#endif\n}}"))

    def stream_checked(self, dtype: DataType) -> str | None:
        """rc_vstreamc_...(T* p, v): a non-temporal store to a p of any alignment, decided at run
        time: one streaming store of the whole vector when p is aligned to its size, else pieces
        of 32 or 16 bytes when p is aligned to those (the write-combining buffers join the pieces
        of consecutive stores into whole lines), else an ordinary store.  For outputs that promise
        no alignment (numpy's large arrays start 16 bytes into a line).  None for element types
        stored through conversions and vectors under 16 bytes."""
        if is_half(dtype) or dtype.is_bool:
            return None
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        size = self.element_width(dtype) * dtype.lanes
        tiers = [(piece, feature, function, itype) for piece, feature, function, itype in (
            (64, "__AVX512F__", "_mm512_stream_si512", "__m512i"),
            (32, "__AVX__", "_mm256_stream_si256", "__m256i"),
            (16, "__SSE2__", "_mm_stream_si128", "__m128i")) if piece <= size and size % piece == 0]
        if not tiers:
            return None
        self.needs_intrinsics = True
        name = f"rc_vstreamc_{dtype.element.name}x{dtype.lanes}"
        body = ["#if defined(__x86_64__)", "    const uintptr_t at = (uintptr_t)(void*)p;"]
        width = self.element_width(dtype)
        for piece, feature, function, itype in tiers:
            body.append(f"#if defined({feature})")
            body.append(f"    if ((at & {piece - 1}u) == 0) {{")
            count = piece // width  # lanes per piece: taken out of v by a shuffle, not through memory
            for first in range(0, dtype.lanes, count):
                part = "v" if count == dtype.lanes else \
                    f"__builtin_shufflevector(v, v, {', '.join(str(first + l) for l in range(count))})"
                body.append(f"        {function}(({itype}*)(void*)(p + {first}), ({itype})({part}));")
            body.append("        return;")
            body.append("    }")
            body.append("#endif")
        body.append("#endif")
        body.append("    memcpy(p, &v, sizeof v);")
        return self._add(name, f"static inline void {name}({st}* p, {vt} v) {{\n" + "\n".join(body) + "\n}")

    def load_stride2(self, dtype: DataType, odd: bool = False) -> str | None:
        """rc_vload2_...(const T* p): lanes elements p[0], p[2], ... p[2 (lanes - 1)] (a stride-2
        read, a strided convolution's input) as two contiguous loads, of p[0 .. lanes) and of
        p[lanes - 1 .. 2 lanes - 1), and one two-source shuffle of their even and odd lanes: no
        element outside the span the gather would read is touched.  None for element types stored
        through conversions (half, bool) and single lanes (they keep the gather).  `odd`: the
        element's index is known to be odd (bfloat16 only uses it)."""
        if dtype.element.name == "bfloat16" and dtype.lanes >= 2:
            return self._bf16_load_stride2_odd(dtype) if odd else self._bf16_load_stride2(dtype)
        if is_half(dtype) or dtype.is_bool or dtype.lanes < 2:
            return None
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        lanes = dtype.lanes
        mask = ", ".join(str(i) for i in list(range(0, lanes, 2)) + list(range(lanes + 1, 2 * lanes, 2)))
        name = f"rc_vload2_{dtype.element.name}x{lanes}"
        fallback = lane_loop(vt, vector_element_ctype(dtype), lanes, "p[2 * l]")
        return self._add(name, (
            f"static inline {vt} {name}(const {st}* p) {{\n"
            f"#if defined(__GNUC__) && !defined(__CUDACC__)\n"
            f"    {vt} a, b;\n    memcpy(&a, p, sizeof a);\n    memcpy(&b, p + {lanes - 1}, sizeof b);\n"
            f"    return __builtin_shufflevector(a, b, {mask});\n"
            f"#else\n{fallback}#endif\n}}"))

    def _bf16_load_stride2(self, dtype: DataType) -> str:
        """The stride-2 read of bfloat16 lanes as float32 (a key of bfloat16 value pages, stored
        in pairs along the keys): the 16-bit patterns p[0], p[2], ... are the low halves of the
        32-bit words at p, so one load of those words and a shift left by 16 give the float32s,
        exactly.  With AVX-512BW the load is masked to the span's 2 lanes - 1 elements (the word
        past the last element is never touched); elsewhere two loads of the span's ends and one
        shuffle of their even lanes, then the zero-extension and the shift as vector operations."""
        vt = self.vtype(dtype)
        lanes = dtype.lanes
        u16, u32 = self.uint_vtype(2, lanes), self.uint_vtype(4, lanes)
        mask = ", ".join(str(i) for i in list(range(0, lanes, 2)) + list(range(lanes + 1, 2 * lanes, 2)))
        name = f"rc_vload2_bfloat16x{lanes}"
        fallback = lane_loop(vt, vector_element_ctype(dtype), lanes, self._from_storage(dtype, "p[2 * l]"))
        self.needs_intrinsics = self.needs_intrinsics or lanes == 16
        masked = (
            "#if defined(__x86_64__) && defined(__AVX512BW__)\n"
            "    return (" + vt + ")_mm512_slli_epi32(_mm512_maskz_loadu_epi16(0x7FFFFFFF, p), 16);\n"
            "#else\n") if lanes == 16 else ""
        return self._add(name, (
            f"static inline {vt} {name}(const uint16_t* p) {{\n"
            f"#if defined(__GNUC__) && !defined(__CUDACC__)\n{masked}"
            f"    {u16} a, b;\n    memcpy(&a, p, sizeof a);\n    memcpy(&b, p + {lanes - 1}, sizeof b);\n"
            f"    {u16} even = __builtin_shufflevector(a, b, {mask});\n"
            f"    return ({vt})(__builtin_convertvector(even, {u32}) << 16);\n"
            + ("#endif\n" if masked else "") +
            f"#else\n{fallback}#endif\n}}"))

    def _bf16_load_stride2_odd(self, dtype: DataType) -> str:
        """The stride-2 read of bfloat16 lanes as float32 from an odd element index (the second
        key of pairs along the keys): p[0], p[2], ... are the high halves of the 32-bit words at
        p - 1 (an even index, so p - 1 is an element of the buffer and the last word ends at the
        span's last element), so one load of those words and an AND with 0xFFFF0000 give the
        float32s, exactly; the same words as the first key's read (a compiler loads them once)."""
        vt = self.vtype(dtype)
        lanes = dtype.lanes
        u32 = self.uint_vtype(4, lanes)
        name = f"rc_vload2odd_bfloat16x{lanes}"
        fallback = lane_loop(vt, vector_element_ctype(dtype), lanes, self._from_storage(dtype, "p[2 * l]"))
        return self._add(name, (
            f"static inline {vt} {name}(const uint16_t* p) {{\n"
            f"#if defined(__GNUC__) && !defined(__CUDACC__)\n"
            f"    {u32} w;\n    memcpy(&w, p - 1, sizeof w);\n"
            f"    return ({vt})(w & 0xFFFF0000u);\n"
            f"#else\n{fallback}#endif\n}}"))

    def gather(self, dtype: DataType, index: DataType) -> str:
        """rc_gather_T(p, idx): lane l is p[idx[l]].  32-bit floats or ints in 8 or 16 lanes use the
        CPU's gather instruction where the build has it (int32 indices: AVX2 or AVX-512; int64
        indices, as the graph level's kernels index: AVX-512, 8 lanes per instruction) (a
        linear layer's W (N, K) packed into k-major panels reads 16 rows at one k: the lane loop
        compiled to 16 index extractions, scalar loads and inserts, and a stack round trip
        whose 64-byte reload of two 32-byte stores cannot be forwarded); otherwise a lane loop."""
        vt, it = self.vtype(dtype), self.vtype(index)
        st = storage_type(dtype.element)
        name = f"rc_gather_{dtype.element.name}x{dtype.lanes}_{short_name(index.element)}"
        body = lane_loop(vt, vector_element_ctype(dtype), dtype.lanes, self._from_storage(dtype, "p[xidx[l]]"),
                         [("idx", vector_element_ctype(index))])
        element, index_name = dtype.element.name, index.element.name
        if element not in ("float32", "int32") or dtype.lanes not in (8, 16) or index_name not in ("int32", "int64"):
            return self._add(name, f"static inline {vt} {name}(const {st}* p, {it} idx) {{\n{body}}}")
        kind = "ps" if element == "float32" else "epi32"
        if index_name == "int32" and dtype.lanes == 8:  # AVX2: (base, index, scale)
            feature = "__AVX2__"
            pointer = "const float*" if element == "float32" else "const int*"
            hardware = f"    return ({vt})_mm256_i32gather_{kind}(({pointer})p, (__m256i)idx, 4);\n"
        elif index_name == "int32":  # AVX-512: (index, base, scale)
            feature = "__AVX512F__"
            hardware = f"    return ({vt})_mm512_i32gather_{kind}((__m512i)idx, (const void*)p, 4);\n"
        else:  # int64 indices, 8 per instruction (AVX-512)
            feature = "__AVX512F__"
            half = self.vtype(dtype.with_lanes(8))
            if dtype.lanes == 8:
                hardware = f"    return ({vt})_mm512_i64gather_{kind}((__m512i)idx, (const void*)p, 4);\n"
            else:
                ihalf = self.vtype(index.with_lanes(8))
                low = ", ".join(str(i) for i in range(8))
                high = ", ".join(str(i) for i in range(8, 16))
                hardware = (f"    {ihalf} i0 = __builtin_shufflevector(idx, idx, {low});\n"
                            f"    {ihalf} i1 = __builtin_shufflevector(idx, idx, {high});\n"
                            f"    {half} r0 = ({half})_mm512_i64gather_{kind}((__m512i)i0, (const void*)p, 4);\n"
                            f"    {half} r1 = ({half})_mm512_i64gather_{kind}((__m512i)i1, (const void*)p, 4);\n"
                            f"    return __builtin_shufflevector(r0, r1, {low}, {high});\n")
        self.needs_intrinsics = True
        return self._add(name, (
            f"static inline {vt} {name}(const {st}* p, {it} idx) {{\n"
            f"#if defined(__x86_64__) && defined({feature})\n{hardware}"
            f"#else\n{body}#endif\n}}"))

    def scatter(self, dtype: DataType, index: DataType) -> str:
        vt, it = self.vtype(dtype), self.vtype(index)
        st = storage_type(dtype.element)
        name = f"rc_scatter_{dtype.element.name}x{dtype.lanes}_{short_name(index.element)}"
        return self._add(name, (
            f"static inline void {name}({st}* p, {it} idx, {vt} v) {{\n"
            f"    for (int l = 0; l < {dtype.lanes}; ++l) p[idx[l]] = {self._to_storage(dtype, 'v[l]')};\n}}"))

    # ------------------------------------------------------------------ arithmetic
    def round_half(self, dtype: DataType) -> str:
        """Round every lane of a float vector to float16 / bfloat16."""
        vt = self.vtype(dtype)
        kind = "f16" if dtype.element.name == "float16" else "bf16"
        name = f"rc_vround_{kind}_{vt[3:]}"
        body = lane_loop(vt, "float", dtype.lanes, f"rc_round_{kind}(xv[l])", [("v", "float")])
        return self._add(name, f"static inline {vt} {name}({vt} v) {{\n{body}}}")

    def lanewise(self, op: str, dtype: DataType, arity: int = 2) -> str:
        """A helper applying the scalar helper rc_<op>_<tag> lane by lane (integer div/mod, abs)."""
        vt = self.vtype(dtype)
        tag = short_name(dtype.element)
        name = f"rc_v{op}_{vt[3:]}"
        params = ", ".join(f"{vt} {p}" for p in "ab"[:arity])
        args = ", ".join(f"x{p}[l]" for p in "ab"[:arity])
        ctype = value_type(dtype.element)
        body = lane_loop(vt, ctype, dtype.lanes, f"rc_{op}_{tag}({args})", [(p, ctype) for p in "ab"[:arity]])
        return self._add(name, f"static inline {vt} {name}({params}) {{\n{body}}}")

    def lanewise_checked(self, op: str, dtype: DataType) -> str:
        """rc_v<op>_checked_T(a, b, zero): integer div/mod lane by lane, setting *zero on a zero divisor."""
        vt = self.vtype(dtype)
        tag = short_name(dtype.element)
        name = f"rc_v{op}_checked_{vt[3:]}"
        ctype = value_type(dtype.element)
        body = lane_loop(vt, ctype, dtype.lanes, f"rc_{op}_checked_{tag}(xa[l], xb[l], zero)",
                         [(p, ctype) for p in "ab"])
        return self._add(name, f"static inline {vt} {name}({vt} a, {vt} b, int32_t* zero) {{\n{body}}}")

    def select(self, dtype: DataType) -> str:
        """rc_vselect_T(mask, a, b): a where the mask lane is set, else b (bitwise, branch free)."""
        vt = self.vtype(dtype)
        width = self.element_width(dtype)
        ut = self.uint_vtype(width, dtype.lanes)
        mt = self.mask(dtype.lanes)
        widen = "(%s)m" % ut if width == 4 else f"__builtin_convertvector(m, {ut})"
        name = f"rc_vselect_{vt[3:]}"
        return self._add(name, (
            f"static inline {vt} {name}({mt} m, {vt} a, {vt} b) {{\n"
            f"    {ut} k = {widen};\n"
            f"    return ({vt})((({ut})a & k) | (({ut})b & ~k));\n}}"))

    def select_compare(self, op: str, dtype: DataType) -> str:
        """rc_vselect_<op>_T(x, y, a, b): a where x <op> y, else b, for float32x16 (one AVX-512
        register): the compare into a mask register and one blend, where the lane mask of
        rc_vcmp and the bitwise rc_vselect take a compare, a widening of the mask and a
        three-input logic op; the two-step form elsewhere.  The predicates are C's: ordered
        (false for NaN) but for `!=`."""
        vt = self.vtype(dtype)
        name = f"rc_vselect_{_COMPARE_NAMES[op]}_{vt[3:]}"
        if name in self.helpers:
            return name
        generic = f"{self.select(dtype)}({self.compare_to_mask(dtype, f'{self.compare(op, dtype)}(x, y)')}, a, b)"
        self.needs_intrinsics = True
        return self._add(name, (
            f"static inline {vt} {name}({vt} x, {vt} y, {vt} a, {vt} b) {{\n"
            "#if defined(__x86_64__) && defined(__AVX512F__)\n"
            f"    return ({vt})_mm512_mask_blend_ps(_mm512_cmp_ps_mask((__m512)x, (__m512)y, {_AVX512_PREDICATES[op]}), "
            "(__m512)b, (__m512)a);\n"
            f"#else\n    return {generic};\n#endif\n}}"))

    def minmax(self, op: str, dtype: DataType) -> str:
        """NaN-propagating min/max for float vectors, plain for integers (branch free)."""
        vt = self.vtype(dtype)
        width = self.element_width(dtype)
        ut = self.uint_vtype(width, dtype.lanes)
        relation = ">" if op == "max" else "<"
        pick = f"{self.compare(relation, dtype)}(a, b)"
        nan = f" | {self.compare('!=', dtype)}(a, a)" if dtype.is_float else ""
        name = f"rc_v{op}_{vt[3:]}"
        generic = (f"    {ut} k = ({ut})({pick}{nan});\n"
                   f"    return ({vt})((({ut})a & k) | (({ut})b & ~k));\n")
        native = _native_minmax(op, dtype, width * dtype.lanes) if dtype.element.name in ("float32", "float64") else None
        if native is not None:
            self.needs_intrinsics = True
            feature, body = native
            body = body.replace("{rt}", vt)
            generic = f"#if defined(__x86_64__) && defined({feature})\n{body}#else\n{generic}#endif\n"
        return self._add(name, f"static inline {vt} {name}({vt} a, {vt} b) {{\n{generic}}}")

    def minmax_ordered(self, op: str, dtype: DataType) -> str:
        """min/max of float vectors whose first operand has no NaN lane (a constant): a > b ? a : b
        (a < b ? a : b), the generic form's result for such an a, NaN in b included, and on x86
        exactly one MAXPS / MINPS (b where either is NaN or both are zeros), not three."""
        vt = self.vtype(dtype)
        width = self.element_width(dtype)
        ut = self.uint_vtype(width, dtype.lanes)
        relation = ">" if op == "max" else "<"
        name = f"rc_v{op}o_{vt[3:]}"
        generic = (f"    {ut} k = ({ut})({self.compare(relation, dtype)}(a, b));\n"
                   f"    return ({vt})((({ut})a & k) | (({ut})b & ~k));\n")
        register = _X86_REGISTERS.get(width * dtype.lanes)
        if register is not None and dtype.element.name in ("float32", "float64"):
            self.needs_intrinsics = True
            suffix = "ps" if dtype.element.name == "float32" else "pd"
            cast = f"({register.ps if suffix == 'ps' else register.pd})"
            native = f"    return ({vt}){register.prefix}_{op}_{suffix}({cast}a, {cast}b);\n"
            generic = f"#if defined(__x86_64__) && defined({register.clamp})\n{native}#else\n{generic}#endif\n"
        return self._add(name, f"static inline {vt} {name}({vt} a, {vt} b) {{\n{generic}}}")

    def compare_to_mask(self, operand: DataType, text: str) -> str:
        """Turn a lane mask as wide as the operands (a rc_vcmp result) into an int32 mask."""
        mt = self.mask(operand.lanes)
        if self.element_width(operand) == 4:
            return f"(({mt})({text}))"
        return f"__builtin_convertvector({text}, {mt})"

    def cast(self, source: DataType, target: DataType) -> str:
        """A helper converting vectors with the scalar rules of spec/c_abi.md."""
        st, tt = self.vtype(source), self.vtype(target)
        name = f"rc_vcast_{st[3:]}_{'f16' if target.element.name == 'float16' else 'bf16' if target.element.name == 'bfloat16' else ''}{tt[3:]}"
        lanes = source.lanes
        s_el, t_el = source.element, target.element
        if t_el.is_bool:
            nonzero = f"{self.compare('!=', source)}(v, z)"
            body = f"    {st} z = {{0}};\n    return {self.compare_to_mask(source, nonzero)};\n"
        elif s_el.is_bool:
            ones = "(-v)"  # a set mask lane is -1; as a number it is 1
            inner = ones if tt == st else f"__builtin_convertvector({ones}, {tt})"
            body = f"    return {inner};\n"
        elif s_el.is_float and t_el.is_integer:
            body = lane_loop(tt, value_type(t_el), lanes, f"rc_f64_to_{short_name(t_el)}((double)xv[l])",
                             [("v", vector_element_ctype(source))])
        elif is_half(target):
            kind = "f16" if t_el.name == "float16" else "bf16"
            rounding = f"rc_round_{kind}_d((double)xv[l])" if s_el.name == "float64" or s_el.is_integer \
                else f"rc_round_{kind}(xv[l])"
            body = lane_loop(tt, "float", lanes, rounding, [("v", vector_element_ctype(source))])
        elif st == tt:
            body = "    return v;\n"
        else:
            body = f"    return __builtin_convertvector(v, {tt});\n"
        return self._add(name, f"static inline {tt} {name}({st} v) {{\n{body}}}")

    def reinterpret(self, source: DataType, target: DataType) -> str:
        """The C function (or cast) taking a source vector to the target vector of the same bits.

        Between vector types of one size a GCC vector cast keeps the bits.  float16/bfloat16
        vectors compute as float vectors, so their lanes go through the 16-bit patterns.
        """
        st, tt = self.vtype(source), self.vtype(target)
        if not (is_half(source) or is_half(target)):
            return f"({tt})"
        name = f"rc_vreinterpret_{source.element.name}_{target.element.name}x{source.lanes}"
        bits = self._to_storage(source, "xv[l]") if is_half(source) \
            else f"({_UINT_CTYPE[2]})xv[l]"
        lane = self._from_storage(target, bits) if is_half(target) else f"({value_type(target.element)}){bits}"
        body = lane_loop(tt, vector_element_ctype(target), source.lanes, lane,
                         [("v", vector_element_ctype(source))])
        return self._add(name, f"static inline {tt} {name}({st} v) {{\n{body}}}")

    def predicate(self, op: str, dtype: DataType) -> str:
        vt, mt = self.vtype(dtype), self.mask(dtype.lanes)
        name = f"rc_v{op}_{vt[3:]}"
        if op == "isnan" and dtype.element.name in ("float32", "float64"):
            # x != x only for a NaN (IEEE compare, no fast-math): one vector compare, its lanes
            # (-1 / 0, of the element's width) converted to the mask's
            return self._add(name, f"static inline {mt} {name}({vt} v) {{\n"
                                   f"    return __builtin_convertvector(v != v, {mt});\n}}")
        body = lane_loop(mt, "int32_t", dtype.lanes, f"{op}(xv[l]) ? -1 : 0", [("v", vector_element_ctype(dtype))])
        return self._add(name, f"static inline {mt} {name}({vt} v) {{\n{body}}}")

    def math(self, op: str, dtype: DataType) -> str:
        """The vector helper for a float math intrinsic (libmvec where available)."""
        compute = dtype if not is_half(dtype) else DataType("float32", dtype.lanes)
        vt = self.vtype(compute)
        name = f"rc_v{op}_{vt[3:]}"
        if name in self.helpers:
            return name
        if op == "sigmoid":
            return self._add(name, self._sigmoid(name, compute, self.math("exp", compute)))
        if op == "exp" and compute.element.name == "float32":  # inline, not libmvec's call per vector
            return self._add(name, self._exp_f32(name, compute))
        if op == "tanh" and compute.element.name == "float32":  # inline on the inline exp
            return self._add(name, self._tanh_f32(name, compute, self.math("exp", compute)))
        if op not in self.mvec_functions:
            return self._add(name, mathlib.vector_math_helper(name, op, compute, vt, self.mvec_functions))
        self.mvec_used.setdefault(f"{op}:{compute.element.name}", mathlib.mvec_declaration(op, compute))
        double = compute.element.name == "float64"
        tag = "F64" if double else "F32"
        arity = 2 if op in ("pow", "atan2", "hypot") else 1
        params = ("x", "y")[:arity]

        def call(clanes, names):
            mtype = f"rc_mvec_{tag.lower()}"
            args = ", ".join(f"({mtype}){n}" for n in names)
            return f"({self.vtype(compute.with_lanes(clanes))})RC_MVEC{arity}_{tag}({mathlib.LIBM[op]})({args})"

        def half_call(names):
            mtype = f"rc_mvech_{tag.lower()}"
            args = ", ".join(f"({mtype}){n}" for n in names)
            return f"({vt})RC_MVECH{arity}_{tag}({mathlib.LIBM[op]})({args})"

        total = compute.lanes * (8 if double else 4)
        branches = [(f"defined(RC_MVEC_BYTES) && {total} == RC_MVEC_BYTES",
                     f"    return {call(compute.lanes, list(params))};\n"),
                    (f"defined(RC_MVEC_HALF_BYTES) && {total} == RC_MVEC_HALF_BYTES",
                     f"    return {half_call(list(params))};\n")]
        branches += [(f"defined(RC_MVEC_BYTES) && {cond}", body) for cond, body in
                     self.split_branches("RC_MVEC_BYTES", [(p, compute) for p in params], compute, call)]
        loop = mathlib.vector_math_helper(name, op, compute, vt, frozenset())
        per_lane = loop[loop.index("{") + 2:loop.rindex("}")]
        signature = f"static inline {vt} {name}({', '.join(f'{vt} {p}' for p in params)})"
        return self._add(name, _with_branches(signature, branches, per_lane))

    def _exp_f32(self, name: str, dtype: DataType) -> str:
        """exp of float32 lanes inline, branch free, within 1.5 ulp where the result is normal
        (spec/c_abi.md): the steps of refcomp.ast.exp_poly (n = round(x / ln 2) by the rounding
        add, r = x - n ln 2 with ln 2 in two parts, e^r by the degree-FLOAT32_DEGREE polynomial)
        rendered as C statements; 2^n applied as two exponent scalings, 2^(n >> 1) then
        2^(n - (n >> 1)), so a result past the largest float is inf and one below the normal
        range rounds once into the subnormals (AVX-512 on 16 lanes: one `vscalefps`).  x is
        first clamped to [-104, 89] (exp is 0, resp. inf, past them after rounding), which keeps
        n in [-150, 128] (on one SSE, AVX or AVX-512 register by MINPS and MAXPS); NaN passes the
        clamps and the polynomial.  One call of libmvec per
        vector costs more than the ~15 instructions inlined here."""
        vt = self.vtype(dtype)
        it = self.int_vtype(4, dtype.lanes)
        ut = self.uint_vtype(4, dtype.lanes)
        steps = _CSteps(vt)
        p, n = exp_steps(_C("x"), FLOAT32_DEGREE, steps)
        body = "".join(steps.lines)
        generic = (f"    const {vt} zero = {{0}};\n"
                   f"    {it} low = (x < -104.0f), high = (x > 89.0f);\n"
                   f"    x = ({vt})((({it})x & ~low) | (({it})(zero - 104.0f) & low));\n"
                   f"    x = ({vt})((({it})x & ~high) | (({it})(zero + 89.0f) & high));\n")
        scale = (f"    {it} k = __builtin_convertvector({n}, {it});\n"
                 f"    {it} k1 = k >> 1;\n"
                 f"    {vt} s1 = ({vt})(({ut})(k1 + 127) << 23);\n"
                 f"    {vt} s2 = ({vt})(({ut})(k - k1 + 127) << 23);\n"
                 f"    return ({p} * s1) * s2;\n")
        register = _X86_REGISTERS.get(4 * dtype.lanes)
        if register is not None and dtype.lanes != 16:
            # one AVX or SSE register: each clamp one MINPS / MAXPS (x where x is NaN), not a
            # compare and a blend (measured 10% on a 4096 x 4096 softmax built for AVX2)
            self.needs_intrinsics = True
            prefix, itype = register.prefix, register.ps
            native = (f"    x = ({vt}){prefix}_min_ps({prefix}_set1_ps(89.0f), {prefix}_max_ps({prefix}_set1_ps(-104.0f), "
                      f"({itype})x));\n")
            generic = (f"#if defined(RC_NATIVE) && defined(__x86_64__) && defined({register.clamp})\n{native}"
                       f"#else\n{generic}#endif\n")
        if dtype.lanes != 16:
            return f"static inline {vt} {name}({vt} x) {{\n{generic}{body}{scale}}}"
        # one AVX-512 register: the clamps and 2^n one instruction each
        self.needs_intrinsics = True
        avx512 = "defined(RC_NATIVE) && defined(__x86_64__) && defined(__AVX512F__)"
        return (f"static inline {vt} {name}({vt} x) {{\n#if {avx512}\n"
                f"    x = ({vt})_mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x));\n"
                f"#else\n{generic}#endif\n{body}#if {avx512}\n"
                f"    return ({vt})_mm512_scalef_ps((__m512){p}, (__m512){n});\n#else\n{scale}#endif\n}}")

    def _tanh_f32(self, name: str, dtype: DataType, exp_name: str) -> str:
        """tanh of float32 lanes inline, branch free, within 1.5 ulp (spec/c_abi.md): for |x| <
        0.625 the odd polynomial a + a^3 P(a^2) of Cephes' tanhf in a = |x| (no cancellation near 0,
        exact for subnormals), else 1 - 2 / (e^{2a} + 1) on the inline exp (e^{2a} >= 3.49 there,
        so the quotient is at most 0.45 and the difference loses nothing; inf past 44 gives
        exactly 1), then x's sign bit (tanh(-0) = -0); NaN stays NaN.  A libmvec call per vector cost the GELU of the models
        benchmark's GPT-2 about twice as much."""
        vt = self.vtype(dtype)
        it = self.int_vtype(4, dtype.lanes)
        ut = self.uint_vtype(4, dtype.lanes)
        c = _TANH_SMALL_COEFFICIENTS
        return (f"static inline {vt} {name}({vt} x) {{\n"
                f"    const {ut} sign = ({ut})x & 0x80000000u;\n"
                f"    const {vt} a = ({vt})(({ut})x & 0x7fffffffu);\n"
                f"    const {vt} z = a * a;\n"
                f"    const {vt} p = (((({c[0]} * z + {c[1]}) * z + {c[2]}) * z + {c[3]}) * z + {c[4]}) * z * a + a;\n"
                f"    const {vt} e = {exp_name}(a + a);\n"
                f"    const {vt} r = 1.0f - 2.0f / (e + 1.0f);\n"
                f"    const {it} small = a < 0.625f;\n"
                f"    return ({vt})(((({it})p & small) | (({it})r & ~small)) | ({it})sign);\n}}")

    def _sigmoid(self, name: str, dtype: DataType, exp_name: str) -> str:
        """sigmoid as the scalar rc_sigmoid (exp of -|x|, which never overflows), branch free."""
        vt = self.vtype(dtype)
        width = self.element_width(dtype)
        ut = self.uint_vtype(width, dtype.lanes)
        one = "1.0" if width == 8 else "1.0f"
        it = self.int_vtype(width, dtype.lanes)
        sign = "UINT64_C(0x8000000000000000)" if width == 8 else "0x80000000u"
        return (f"static inline {vt} {name}({vt} x) {{\n"
                f"    {vt} e = {exp_name}(({vt})(({ut})x | {sign}));\n"
                f"    {vt} r = {one} / ({one} + e);\n"
                f"    {ut} k = ~({ut})(({it})x >> {8 * width - 1}); /* all ones where x >= 0 */\n"
                f"    return ({vt})((({ut})r & k) | (({ut})(e * r) & ~k));\n}}")

    # ------------------------------------------------------------------ output
    def text(self) -> str:
        parts = [_VBYTES] if any("RC_VBYTES" in t for t in self.helpers.values()) else []
        parts += list(self.typedefs.values())
        if self.mvec_used:
            parts.append("#if defined(RC_MVEC_W32)")
            parts.extend(self.mvec_used.values())
            parts.append("#endif")
        # Always inlined: a wide vector passed to a real call goes through memory (and the
        # x86-64 ABI for 64-byte vectors differs with and without AVX-512).
        parts.extend(h.replace("static inline ", "RC_INLINE ", 1) for h in self.helpers.values())
        if self.helpers:
            parts.insert(0, "#define RC_INLINE static inline __attribute__((always_inline))")
        return "\n".join(parts) + ("\n" if parts else "")


def _native_minmax(op: str, dtype: DataType, size: int) -> tuple[str, str] | None:
    """(feature macro, body) of a float min/max on one x86 register: MAXPS/MINPS (a > b ? a : b,
    a < b ? a : b: b when either is NaN or both are zeros, as the generic form) and a blend that
    puts a back where a is NaN: three instructions for the generic form's compare, compare,
    combine and select.  On one AVX-512 register the blend and its compare are one VFIXUPIMM
    whose table gives a (its quiet form) where a is a NaN and keeps the maximum elsewhere (a
    max-reduction's accumulator: two instructions per vector instead of three)."""
    suffix = "ps" if dtype.element.name == "float32" else "pd"
    register = _X86_REGISTERS.get(size)
    if register is None:
        return None
    prefix = register.prefix
    vt = f"({register.ps if suffix == 'ps' else register.pd})"
    picked = f"{prefix}_{op}_{suffix}({vt}a, {vt}b)"
    if size == 16:
        nan = f"_mm_cmpunord_{suffix}({vt}a, {vt}a)"
        body = f"    return ({{rt}}){prefix}_blendv_{suffix}({picked}, {vt}a, {nan});\n"
    elif size == 32:
        nan = f"_mm256_cmp_{suffix}({vt}a, {vt}a, _CMP_UNORD_Q)"
        body = f"    return ({{rt}}){prefix}_blendv_{suffix}({picked}, {vt}a, {nan});\n"
    else:
        # the table's token per class of a, 4 bits each: QNaN (class 0) -> 1, a; SNaN (1) -> 2,
        # a made quiet; every other class -> 0, the first operand (the max or min) kept
        table = "_mm512_set1_epi32(0x21)" if suffix == "ps" else "_mm512_set1_epi64(0x21)"
        body = f"    return ({{rt}}){prefix}_fixupimm_{suffix}({picked}, {vt}a, {table}, 0);\n"
    return register.minmax, body


def lane_loop(vtype: str, ctype: str, lanes: int, expr: str, copies=()) -> str:
    """A function body returning the vector vtype whose lane l is expr (C text using l).

    copies: (parameter, element C type) pairs; each vector parameter p is copied into the plain
    array xp first, so expr reads its lanes as xp[l].  The lanes are computed into an array and
    copied into the vector in one piece.  gcc 12 at -O3 fails on vectors filled element by element
    (`r[l] = ...`): an internal compiler error in store_constructor (AVX-512, a float -> int64
    conversion feeding a compare-and-select inside a vectorised loop) and a wrong uint16 floordiv;
    through arrays the same loops still become single instructions (convert, gather).
    """
    lines = "".join(f"    {ct} x{p}[{lanes}];\n    memcpy(x{p}, &{p}, sizeof x{p});\n" for p, ct in copies)
    return (f"{lines}    {ctype} z[{lanes}];\n"
            f"    for (int l = 0; l < {lanes}; ++l) z[l] = {expr};\n"
            f"    {vtype} r;\n    memcpy(&r, z, sizeof r);\n    return r;\n")


def _with_branches(signature: str, branches: list[tuple[str, str]], direct: str) -> str:
    """A function whose body picks a chunked branch by preprocessor condition, else `direct`."""
    if not branches:
        return f"{signature} {{\n{direct}}}"
    text = [f"{signature} {{"]
    for k, (condition, body) in enumerate(branches):
        text.append(f"#{'if' if k == 0 else 'elif'} {condition}")
        text.append(body.rstrip("\n"))
    text.append("#else")
    text.append(direct.rstrip("\n"))
    text.append("#endif")
    text.append("}")
    return "\n".join(text)


class _X86Register(NamedTuple):
    """One x86 vector register: its intrinsics' prefix, its float32 and float64 types, and the
    feature macro each native helper on it needs: `minmax` (a float min/max: MINPS/MAXPS and, on
    16 bytes, BLENDVPS of SSE4.1) and `clamp` (the float32 exp's clamps: MINPS/MAXPS, SSE2)."""

    prefix: str
    ps: str
    pd: str
    minmax: str
    clamp: str


# by the register's width in bytes
_X86_REGISTERS = {16: _X86Register("_mm", "__m128", "__m128d", minmax="__SSE4_1__", clamp="__SSE2__"),
                  32: _X86Register("_mm256", "__m256", "__m256d", minmax="__AVX__", clamp="__AVX__"),
                  64: _X86Register("_mm512", "__m512", "__m512d", minmax="__AVX512F__", clamp="__AVX512F__")}
_COMPARE_NAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
# C's comparisons as AVX-512 compare predicates (quiet; `!=` is the unordered one: true for NaN)
_AVX512_PREDICATES = {"==": "_CMP_EQ_OQ", "!=": "_CMP_NEQ_UQ", "<": "_CMP_LT_OQ", "<=": "_CMP_LE_OQ",
                      ">": "_CMP_GT_OQ", ">=": "_CMP_GE_OQ"}


class _C(str):
    """A C expression as text, for exp_steps: + - * write the operation, each in parentheses."""

    def __add__(self, other):
        return _C(f"({self} + {other})")

    def __sub__(self, other):
        return _C(f"({self} - {other})")

    def __mul__(self, other):
        return _C(f"({self} * {other})")


# tanh on |x| < 0.625: x + x^3 P(x^2), P's coefficients (highest first) as Cephes' tanhf has them
_TANH_SMALL_COEFFICIENTS = ("-5.70498872745e-3f", "2.06390887954e-2f", "-5.37397155531e-2f",
                            "1.33314422036e-1f", "-3.33332819422e-1f")


class _CSteps:
    """exp_steps' renderer for a vector helper: each bound step a local of vector type vt, the
    constants float32 literals; scale returns (p, n) for the helper's own 2^n code."""

    def __init__(self, vt: str) -> None:
        self.vt = vt
        self.lines: list[str] = []

    def const(self, value: float) -> _C:
        text = f"{struct.unpack('f', struct.pack('f', value))[0]:.9g}"  # 9 digits: the float32 exactly
        text += "f" if any(ch in text for ch in ".e") else ".0f"
        return _C(f"({text})" if text.startswith("-") else text)

    def bind(self, name: str, value: _C) -> _C:
        self.lines.append(f"    {self.vt} {name} = {value};\n")
        return _C(name)

    def scale(self, p: _C, n: _C, t: _C) -> tuple[_C, _C]:
        return p, n
