"""GCC vector types and the small inline helpers the native target's vector code calls.

Helpers are created on demand and emitted in first-request order, so a kernel's source only holds
what it uses and is the same on every run.  A vector of dtype `float32x8` is `rc_f32x8`; bool
vectors are int32 masks (`rc_i32x8`, 0 or -1 per lane); float16/bfloat16 vectors compute as float
vectors rounded after each operation.  Lane loops over vector elements are written so gcc turns
them into single instructions at -O3 (broadcast, blend, convert).
"""
from __future__ import annotations

from ..ast.dtype import DataType
from . import mathlib
from .ctype import (
    is_half, short_name, storage_type, value_type, vector_bytes, vector_element_ctype,
    vector_element_tag,
)

_INT_TAGS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_UINT_CTYPE = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}
_INT_CTYPE = {1: "int8_t", 2: "int16_t", 4: "int32_t", 8: "int64_t"}


class VectorLib:
    """The typedefs and helpers one kernel's vector code needs."""

    def __init__(self, mvec_functions: frozenset = frozenset()) -> None:
        self.typedefs: dict[str, str] = {}
        self.helpers: dict[str, str] = {}
        self.mvec_functions = mvec_functions
        self.mvec_used: dict[str, str] = {}

    # ------------------------------------------------------------------ types
    def vtype(self, dtype: DataType) -> str:
        """The vector type of dtype (lanes > 1), declared on first use."""
        name = f"rc_{vector_element_tag(dtype)}x{dtype.lanes}"
        if name not in self.typedefs:
            element = vector_element_ctype(dtype)
            self.typedefs[name] = (f"typedef {element} {name} "
                                   f"__attribute__((vector_size({vector_bytes(dtype)})));")
        return name

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
        return self._add(f"rc_bcast_{vt[3:]}", (
            f"static inline {vt} rc_bcast_{vt[3:]}({arg} x) {{\n"
            f"    {vt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) r[l] = {value};\n    return r;\n}}"))

    def ramp(self, dtype: DataType) -> str:
        vt = self.vtype(dtype)
        ctype = value_type(dtype.element)
        wide = "uint64_t" if dtype.element.bits == 64 else "uint32_t"
        return self._add(f"rc_ramp_{vt[3:]}", (
            f"static inline {vt} rc_ramp_{vt[3:]}({ctype} base, {ctype} stride) {{\n"
            f"    {vt} r;\n"
            f"    for (int l = 0; l < {dtype.lanes}; ++l) "
            f"r[l] = ({ctype})(({wide})base + ({wide})stride * ({wide})l);\n    return r;\n}}"))

    # ------------------------------------------------------------------ memory
    def _from_storage(self, dtype: DataType, expr: str) -> str:
        element = dtype.element
        if element.is_bool:
            return f"({expr} ? -1 : 0)"
        if element.name == "float16":
            return f"rc_f16_to_float({expr})"
        if element.name == "bfloat16":
            return f"rc_bf16_to_float({expr})"
        return expr

    def _to_storage(self, dtype: DataType, expr: str) -> str:
        element = dtype.element
        if element.is_bool:
            return f"(uint8_t)({expr} != 0)"
        if element.name == "float16":
            return f"rc_float_to_f16({expr})"
        if element.name == "bfloat16":
            return f"rc_float_to_bf16({expr})"
        return expr

    def load(self, dtype: DataType) -> str:
        """rc_vload_...(const T* p): lanes consecutive elements from p (no alignment needed)."""
        vt = self.vtype(dtype)
        st = storage_type(dtype.element)
        name = f"rc_vload_{dtype.element.name}x{dtype.lanes}"
        if is_half(dtype) or dtype.is_bool:
            body = (f"    {vt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) "
                    f"r[l] = {self._from_storage(dtype, 'p[l]')};\n    return r;\n")
        else:
            body = f"    {vt} r;\n    memcpy(&r, p, sizeof r);\n    return r;\n"
        return self._add(name, f"static inline {vt} {name}(const {st}* p) {{\n{body}}}")

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

    def gather(self, dtype: DataType, index: DataType) -> str:
        vt, it = self.vtype(dtype), self.vtype(index)
        st = storage_type(dtype.element)
        name = f"rc_gather_{dtype.element.name}x{dtype.lanes}_{short_name(index.element)}"
        return self._add(name, (
            f"static inline {vt} {name}(const {st}* p, {it} idx) {{\n"
            f"    {vt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) "
            f"r[l] = {self._from_storage(dtype, 'p[idx[l]]')};\n    return r;\n}}"))

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
        return self._add(name, (
            f"static inline {vt} {name}({vt} v) {{\n"
            f"    {vt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) r[l] = rc_round_{kind}(v[l]);\n"
            f"    return r;\n}}"))

    def lanewise(self, op: str, dtype: DataType, arity: int = 2) -> str:
        """A helper applying the scalar helper rc_<op>_<tag> lane by lane (integer div/mod, abs)."""
        vt = self.vtype(dtype)
        tag = short_name(dtype.element)
        name = f"rc_v{op}_{vt[3:]}"
        params = ", ".join(f"{vt} {p}" for p in "ab"[:arity])
        args = ", ".join(f"{p}[l]" for p in "ab"[:arity])
        return self._add(name, (
            f"static inline {vt} {name}({params}) {{\n"
            f"    {vt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) r[l] = rc_{op}_{tag}({args});\n"
            f"    return r;\n}}"))

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

    def minmax(self, op: str, dtype: DataType) -> str:
        """NaN-propagating min/max for float vectors, plain for integers (branch free)."""
        vt = self.vtype(dtype)
        width = self.element_width(dtype)
        ut = self.uint_vtype(width, dtype.lanes)
        relation = ">" if op == "max" else "<"
        nan = " | (a != a)" if dtype.is_float else ""
        name = f"rc_v{op}_{vt[3:]}"
        return self._add(name, (
            f"static inline {vt} {name}({vt} a, {vt} b) {{\n"
            f"    {ut} k = ({ut})((a {relation} b){nan});\n"
            f"    return ({vt})((({ut})a & k) | (({ut})b & ~k));\n}}"))

    def compare_to_mask(self, operand: DataType, text: str) -> str:
        """Turn a GCC vector comparison (lanes as wide as the operands) into an int32 mask."""
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
            body = f"    return {self.compare_to_mask(source, 'v != 0')};\n"
        elif s_el.is_bool:
            ones = "(-v)"  # a set mask lane is -1; as a number it is 1
            inner = ones if tt == st else f"__builtin_convertvector({ones}, {tt})"
            body = f"    return {inner};\n"
        elif s_el.is_float and t_el.is_integer:
            tag = short_name(t_el)
            body = (f"    {tt} r;\n    for (int l = 0; l < {lanes}; ++l) r[l] = rc_f64_to_{tag}((double)v[l]);\n"
                    f"    return r;\n")
        elif is_half(target):
            kind = "f16" if t_el.name == "float16" else "bf16"
            if s_el.name == "float64" or s_el.is_integer:
                body = (f"    {tt} r;\n    for (int l = 0; l < {lanes}; ++l) r[l] = rc_round_{kind}_d((double)v[l]);\n"
                        f"    return r;\n")
            else:
                body = (f"    {tt} r;\n    for (int l = 0; l < {lanes}; ++l) r[l] = rc_round_{kind}(v[l]);\n"
                        f"    return r;\n")
        elif st == tt:
            body = "    return v;\n"
        else:
            body = f"    return __builtin_convertvector(v, {tt});\n"
        return self._add(name, f"static inline {tt} {name}({st} v) {{\n{body}}}")

    def predicate(self, op: str, dtype: DataType) -> str:
        vt, mt = self.vtype(dtype), self.mask(dtype.lanes)
        name = f"rc_v{op}_{vt[3:]}"
        return self._add(name, (
            f"static inline {mt} {name}({vt} v) {{\n"
            f"    {mt} r;\n    for (int l = 0; l < {dtype.lanes}; ++l) r[l] = {op}(v[l]) ? -1 : 0;\n"
            f"    return r;\n}}"))

    def math(self, op: str, dtype: DataType) -> str:
        """The vector helper for a float math intrinsic (libmvec where available)."""
        compute = dtype if not is_half(dtype) else DataType("float32", dtype.lanes)
        vt = self.vtype(compute)
        name = f"rc_v{op}_{vt[3:]}"
        if name in self.helpers:
            return name
        if op == "sigmoid":
            self.math("exp", compute)
        if op in self.mvec_functions:
            self.mvec_used.setdefault(f"{op}:{compute.element.name}",
                                      mathlib.mvec_declaration(op, compute))
        return self._add(name, mathlib.vector_math_helper(name, op, compute, vt, self.mvec_functions))

    # ------------------------------------------------------------------ output
    def text(self) -> str:
        parts = list(self.typedefs.values())
        if self.mvec_used:
            parts.append("#if defined(RC_MVEC_W32)")
            parts.extend(self.mvec_used.values())
            parts.append("#endif")
        parts.extend(self.helpers.values())
        return "\n".join(parts) + ("\n" if parts else "")
