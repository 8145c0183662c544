"""lower_to_c: a lowered graph function (VM code after plan_memory) as one C function.

The C function runs the whole graph in one call: it derives every symbolic dim once from the
inputs' shapes (checking the other dims and the runtime shape checks), lays the intermediates
out in one arena (one slot per planned storage token, one per unplanned intermediate, 64-byte
aligned), and calls every kernel straight-line through its entry point, and OpenBLAS's sgemm
for the BLAS externs.  The calling convention, arena and error codes are spec/graph_c.md.

`lower_to_c(function, kernels, externs)` returns a CGraphSource, or raises Unsupported with the
reason the VM must run this function instead (control flow, calls of other graph functions,
data-dependent shapes, Python externs, interpreted kernels, tuple or scalar parameters).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...ast import expr as tir
from ...ast.functor import free_vars as tir_free_vars
from ...emit_c import c_string, mangle
from ...runtime import vm as V
from ...runtime.loader import LoadedKernel

BLAS_EXTERNS = {"refcomp.blas.sgemm_nn": False, "refcomp.blas.sgemm_nt": True}  # symbol -> transposed b
ARENA_ALIGN = 64
ARGUMENT_ERROR, RUNTIME_FAILURE, ABOVE_BOUND = 1, 2, 3
# A BLAS call (all its batch entries) of at least this many multiply-adds is shared over the
# OpenMP threads, by batch entries or by blocks of output columns; a smaller one runs on the
# calling thread.  The VM shares only products past its batched-sgemm limits (its helper threads
# cost far more than an OpenMP region).  BERT of the models benchmark (batch 2, seq 64, hidden
# 128), 2 threads of a Zen 3, per call site, best of three profiles: its 128 x 128 x 128
# products 72-79 -> 49-62 us, the attention's 8 x (64 x 64 x 32) 50-56 -> 29-33 us, the model
# 2.02 -> 1.69 ms (with the VM's limits, m*n*k > 4e6 and m*n > 4800, the small products ran on
# one thread).
SHARE_MIN_MNK = 1 << 18


class Unsupported(Exception):
    """The graph function cannot be compiled to C; the message says why (the VM runs it)."""


@dataclass
class CGraphSource:
    """The C text of one graph function and what its Python wrapper needs to call it."""

    name: str
    symbol: str
    source: str
    inputs: list[tuple[str, int, str]]  # (what, ndim, dtype) per parameter
    outputs: list[tuple[int, str]]  # (ndim, dtype) per output tensor
    returns_tuple: bool
    constants: list[np.ndarray]
    kernels: list[LoadedKernel]  # fns[2i] = entry, fns[2i+1] = message of kernels[i]
    uses_blas: bool  # fns[-1] = OpenBLAS's cblas sgemm
    kernel_calls: int
    param_names: tuple[str, ...] = ()
    call_sites: tuple[str, ...] = ()  # the kernel (or BLAS symbol) of each call site, in order


# Built with RCG_PROFILE defined, the function adds the wall time of each call site (a kernel or
# sgemm call, measured from the end of the one before: the gap of checks between them counts
# with the call) to rcg_site_seconds[site], which <symbol>_site_seconds() returns: the
# per-kernel profile of CompiledGraphFunction.profile.  Without it the marks compile to nothing,
# so the C of an embedded export is the same.
_PROFILE = r"""
#ifdef RCG_PROFILE
#ifdef _OPENMP
static inline double rcg_now(void) { return omp_get_wtime(); }
#else
#include <time.h>
static inline double rcg_now(void) { return (double)clock() / CLOCKS_PER_SEC; }
#endif
static double rcg_site_seconds[%(sites)d];
double* %(symbol)s_site_seconds(void) { return rcg_site_seconds; }
#define RCG_PROFILE_START() double rcg_last = rcg_now(); (void)rcg_last
#define RCG_PROFILE_MARK(site) do { const double rcg_t = rcg_now(); \
    rcg_site_seconds[site] += rcg_t - rcg_last; rcg_last = rcg_t; } while (0)
#else
#define RCG_PROFILE_START() ((void)0)
#define RCG_PROFILE_MARK(site) ((void)0)
#endif
"""


def _profile_section(symbol: str, sites: int) -> str:
    return _PROFILE.replace("%(sites)d", str(max(1, sites))).replace("%(symbol)s", symbol)


_C_DTYPES = {"float32": "float", "float64": "double"}


def _itemsize(dtype: str) -> int:
    from ...ast.dtype import dtype as to_dtype

    try:
        t = to_dtype(dtype)
    except ValueError:
        raise Unsupported(f"tensors of dtype {dtype} have no numpy equivalent") from None
    if t.is_string:
        raise Unsupported("string tensors live in the VM")
    return t.numpy().itemsize


class _Expr:
    """Integer PrimExprs over bound size vars as C (int64_t) expressions."""

    def __init__(self, names: dict) -> None:
        self.names = names

    def __call__(self, e: Any) -> str:
        if isinstance(e, (int, np.integer)):
            return f"INT64_C({int(e)})"
        if isinstance(e, tir.IntImm):
            return f"INT64_C({int(e.value)})" if not e.dtype.element.is_bool else str(int(bool(e.value)))
        if isinstance(e, tir.Var):
            if e not in self.names:
                raise Unsupported(f"data-dependent shape: size var {e.name} is not bound by the inputs' shapes")
            return self.names[e]
        binary = {tir.Add: "+", tir.Sub: "-", tir.Mul: "*", tir.EQ: "==", tir.NE: "!=", tir.LT: "<",
                  tir.LE: "<=", tir.GT: ">", tir.GE: ">=", tir.And: "&&", tir.Or: "||"}
        kind = type(e)
        if kind in binary:
            return f"({self(e.a)} {binary[kind]} {self(e.b)})"
        helpers = {tir.FloorDiv: "rcg_floordiv", tir.FloorMod: "rcg_floormod", tir.TruncDiv: "rcg_truncdiv",
                   tir.TruncMod: "rcg_truncmod", tir.Min: "rcg_min", tir.Max: "rcg_max"}
        if kind in helpers:
            return f"{helpers[kind]}({self(e.a)}, {self(e.b)})"
        if kind is tir.Not:
            return f"(!{self(e.a)})"
        if kind is tir.Select:
            return f"({self(e.condition)} ? {self(e.true_value)} : {self(e.false_value)})"
        if kind is tir.Cast and (e.dtype.element.is_integer or e.dtype.element.is_bool):
            return f"((int64_t)({self(e.value)}))"
        raise Unsupported(f"shape expression {type(e).__name__} has no C form here")


_PRELUDE = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define RCG_PARALLEL_FOR _Pragma("omp parallel for num_threads(parts) schedule(static)")
static inline int rcg_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }
#else
#define RCG_PARALLEL_FOR
static inline int rcg_threads(void) { return 1; }
#endif
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
static _Thread_local char rcg_message[1024];
#else
static char rcg_message[1024];
#endif
#define RCG_SHARE_MIN_MNK INT64_C(%(share)d)
static inline int64_t rcg_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t rcg_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t rcg_truncdiv(int64_t a, int64_t b) { return a / b; }
static inline int64_t rcg_truncmod(int64_t a, int64_t b) { return a % b; }
static inline int64_t rcg_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t rcg_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t rcg_align(int64_t n) { return (n + %(align)d - 1) / %(align)d * %(align)d; }
/* Python's text of a shape tuple: (), (5,), (2, 3) */
static inline void rcg_shape_text(char* out, size_t size, const int64_t* dims, int ndim) {
    size_t used = (size_t)snprintf(out, size, "(");
    for (int i = 0; i < ndim && used < size; ++i)
        used += (size_t)snprintf(out + used, size - used, i ? ", %%lld" : "%%lld", (long long)dims[i]);
    if (used < size) snprintf(out + used, size - used, ndim == 1 ? ",)" : ")");
}
typedef void (*rcg_fn)(void);  /* any function; cast to its own type before the call */
typedef void (*rcg_sgemm_t)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t,
                            const float*, int64_t, float, float*, int64_t);
""".replace("%(align)d", str(ARENA_ALIGN)).replace("%(share)d", str(SHARE_MIN_MNK)).replace("%%", "%")


class _Lowering:
    def __init__(self, function: V.VMFunction, kernels: dict[str, Callable], externs: dict[str, Callable]) -> None:
        self.f = function
        self.kernels = kernels
        self.externs = externs
        self.names: dict[tir.Var, str] = {}
        self.expr = _Expr(self.names)
        self.lines: list[str] = []
        self.regs: dict[int, tuple] = {}  # reg -> ("tensor", c pointer text, dims (C texts), dtype) | ("tuple", regs)
        self.allocs: list[tuple[int, V.Alloc]] = []
        self.constants: list[np.ndarray] = []
        self.kernel_order: list[str] = []
        self.uses_blas = False
        self.kernel_calls = 0
        self.call_sites: list[str] = []  # what each call site calls, in code order (the profile's rows)
        self.inputs: list[tuple[str, int, str]] = []
        self.shape_offset = 0
        self.match_lines: list[str] = []  # the checks of match_casts in the body (shapes only)
        self.pending_checks: list = []

    def fail_block(self, code: int, fmt: str, *args: str) -> list[str]:
        joined = "".join(f", {a}" for a in args)
        return [f"snprintf(rcg_message, sizeof rcg_message, {c_string(fmt)}{joined});", f"return {code};"]

    def bound_text(self) -> tuple[str, list[str]]:
        if not self.names:
            return "no size vars bound", []
        return ", ".join(f"{v.name} = %lld" for v in self.names), [f"(long long){n}" for n in self.names.values()]

    def lower(self) -> CGraphSource:
        # parameters are matched first; their dims are read from the shapes array
        body = self.match_params(list(self.f.code))
        checks = self.checks_after_params()
        main = self.body(body)
        if self.pending_checks:
            raise Unsupported(f"a runtime shape check uses a size var no shape binds: {self.pending_checks[0].message}")
        return self.assemble(checks + self.match_lines, main)

    def match_params(self, code: list) -> list:
        k = 0
        seen: set[int] = set()
        while k < len(code) and type(code[k]) is V.MatchShape and code[k].reg < self.f.num_params:
            inst = code[k]
            if inst.reg in seen:
                raise Unsupported(f"parameter {inst.what} is matched twice")
            seen.add(inst.reg)
            self.match_param(inst)
            k += 1
        missing = [self.f.param_names[r] for r in range(self.f.num_params) if r not in seen]
        if missing:
            raise Unsupported(f"parameter {missing[0]} is not a tensor (tuple or scalar parameters run in the VM)")
        return code[k:]

    def match_param(self, inst: V.MatchShape) -> None:
        if inst.ndim == -1:
            raise Unsupported(f"{inst.what} has an unknown rank")
        if inst.dtype is None:
            raise Unsupported(f"{inst.what} has an unknown dtype")
        _itemsize(inst.dtype)
        base = self.shape_offset
        self.shape_offset += inst.ndim
        dims = [f"shapes[{base + axis}]" for axis in range(inst.ndim)]
        self.inputs.append((inst.what, inst.ndim, inst.dtype))
        index = len(self.inputs) - 1
        self.regs[inst.reg] = ("tensor", f"inputs[{index}]", dims, inst.dtype, None)
        if inst.shape is None:
            return
        from ...runtime.vm import _must_be

        for axis, dim in enumerate(inst.shape):
            if isinstance(dim, tir.Var) and dim not in self.names:
                name = mangle(dim.name, f"d{len(self.names)}_")
                self.lines.append(f"const int64_t {name} = {dims[axis]};")
                self.names[dim] = name
                continue
            expected = self.expr(dim)
            bound, bound_args = self.bound_text()
            fmt = f"{inst.what}: dim {axis} is %lld but {_must_be(dim)}%lld (shape %s, {bound})"
            self.lines.append(f"if ({dims[axis]} != {expected}) {{")
            self.lines.append(f"    char shape[256]; rcg_shape_text(shape, sizeof shape, shapes + {base}, {inst.ndim});")
            self.lines += ["    " + x for x in self.fail_block(ARGUMENT_ERROR, fmt, f"(long long){dims[axis]}",
                                                            f"(long long)({expected})", "shape", *bound_args)]
            self.lines.append("}")

    def checks_after_params(self) -> list[str]:
        """The runtime shape checks whose size vars the parameters bind; the others wait for the
        match_cast that binds them (emit_bound_checks)."""
        self.pending_checks = list(self.f.checks)
        return self.emit_bound_checks()

    def emit_bound_checks(self) -> list[str]:
        out = []
        ready = [c for c in self.pending_checks if all(v in self.names for v in tir_free_vars(c.condition))]
        self.pending_checks = [c for c in self.pending_checks if c not in ready]
        for check in ready:
            cond = self.expr(check.condition)
            bound, bound_args = self.bound_text()
            out.append(f"if (!({cond})) {{")
            out += ["    " + x for x in self.fail_block(
                ARGUMENT_ERROR, f"runtime shape check failed: %s ({bound})", c_string(check.message), *bound_args)]
            out.append("}")
        return out

    def tensor(self, reg: int, what: str) -> tuple:
        value = self.regs.get(reg)
        if value is None or value[0] != "tensor":
            raise Unsupported(f"{what} is not a tensor of known shape")
        return value

    def body(self, code: list) -> list[str]:
        out: list[str] = []
        for inst in code:
            kind = type(inst)
            if kind is V.Alloc:
                dims = [self.expr(d) for d in inst.shape]
                self.regs[inst.dst] = ("tensor", f"rcg_tensor_{inst.dst}", dims, inst.dtype, inst.dst)
                self.allocs.append((inst.dst, inst))
            elif kind is V.LoadConst:
                if not isinstance(inst.value, np.ndarray) or inst.value.dtype.kind == "O":
                    raise Unsupported(f"a constant of type {type(inst.value).__name__} has no C form")
                array = np.ascontiguousarray(inst.value)
                self.constants.append(array)
                self.regs[inst.dst] = ("tensor", f"consts[{len(self.constants) - 1}]",
                                       [f"INT64_C({d})" for d in array.shape], str(array.dtype), None)
            elif kind is V.View:
                # the source's storage under the view's dims (plan_memory keeps it live while the view is read)
                _, pointer, _, dtype, _ = self.tensor(inst.src, "the source of a view")
                self.regs[inst.dst] = ("tensor", pointer, [self.expr(d) for d in inst.shape], dtype, None)
            elif kind is V.Move:
                self.regs[inst.dst] = self.regs.get(inst.src)
            elif kind is V.MakeTuple:
                self.regs[inst.dst] = ("tuple", inst.fields)
            elif kind is V.GetItem:
                source = self.regs.get(inst.src)
                if source is None or source[0] != "tuple":
                    raise Unsupported("an item of a tuple that is not built in this function")
                self.regs[inst.dst] = self.regs.get(source[1][inst.index])
            elif kind is V.CallKernel:
                out += self.call_kernel(inst) + [f"RCG_PROFILE_MARK({len(self.call_sites)});"]
                self.call_sites.append(inst.kernel)
            elif kind is V.CallPacked:
                out += self.call_blas(inst) + [f"RCG_PROFILE_MARK({len(self.call_sites)});"]
                self.call_sites.append(inst.symbol)
            elif kind is V.MatchShape:
                self.match_cast(inst)
            elif kind is V.MakeShape:
                raise Unsupported("a shape or scalar value is computed at run time")
            elif kind is V.CallFunction:
                raise Unsupported(f"calls graph function {inst.function}")
            elif kind is V.Branch:
                raise Unsupported("control flow (R.If)")
            elif kind is V.Return:
                self.result = inst.reg
                return out
            else:
                raise Unsupported(f"instruction {kind.__name__}")
        raise Unsupported("the function does not return")

    def match_cast(self, inst: V.MatchShape) -> None:
        """A match_cast of a tensor computed here: its dims are expressions in the size vars bound
        so far, so the check (and any size var it binds) runs with the parameters' checks, before
        the first kernel, with the VM's message.  A rank or dtype that differs is left to the VM."""
        _, pointer, dims, dtype, alloc = self.tensor(inst.reg, inst.what)
        if inst.ndim != -1 and inst.ndim != len(dims):
            raise Unsupported(f"{inst.what}: a {len(dims)}-d tensor is cast to {inst.ndim} dims")
        if inst.dtype is not None and inst.dtype != dtype:
            raise Unsupported(f"{inst.what}: a {dtype} tensor is cast to {inst.dtype}")
        if inst.shape is None:
            return
        from ...runtime.vm import _must_be

        lines = self.match_lines
        for axis, dim in enumerate(inst.shape):
            if isinstance(dim, tir.Var) and dim not in self.names:
                name = mangle(dim.name, f"d{len(self.names)}_")
                lines.append(f"const int64_t {name} = {dims[axis]};")
                self.names[dim] = name
                continue
            expected = self.expr(dim)
            bound, bound_args = self.bound_text()
            fmt = f"{inst.what}: dim {axis} is %lld but {_must_be(dim)}%lld (shape %s, {bound})"
            lines.append(f"if (({dims[axis]}) != {expected}) {{")
            lines.append(f"    const int64_t dims[] = {{{', '.join(dims) or '0'}}}; char shape[256];")
            lines.append(f"    rcg_shape_text(shape, sizeof shape, dims, {len(dims)});")
            lines += ["    " + x for x in self.fail_block(ARGUMENT_ERROR, fmt, f"(long long)({dims[axis]})",
                                                            f"(long long)({expected})", "shape", *bound_args)]
            lines.append("}")
        self.regs[inst.reg] = ("tensor", pointer, [self.names.get(d, t) if isinstance(d, tir.Var) else t
                                                    for d, t in zip(inst.shape, dims)], dtype, alloc)
        lines += self.emit_bound_checks()

    def call_kernel(self, inst: V.CallKernel) -> list[str]:
        kernel = self.kernels[inst.kernel]
        if not isinstance(kernel, LoadedKernel) or not hasattr(kernel.module, "params"):
            raise Unsupported(f"kernel {inst.kernel} is not compiled C (target 'interpret')")
        if inst.kernel not in self.kernel_order:
            self.kernel_order.append(inst.kernel)
        index = self.kernel_order.index(inst.kernel)
        func = kernel.func
        values = list(inst.args) + list(inst.outs)
        buffers = [p for p in func.params if not isinstance(p, tir.Var)]
        scalar_params = [p for p in func.params if isinstance(p, tir.Var)]
        if len(buffers) != len(values) or len(scalar_params) != len(inst.scalars):
            raise Unsupported(f"kernel {inst.kernel} takes {len(buffers)} tensors and {len(scalar_params)} scalars")
        tensors = [self.tensor(r, f"an argument of {inst.kernel}") for r in values]
        shapes = kernel.signature.shapes
        by_buffer = dict(zip(buffers, tensors))
        scalars = dict(zip(scalar_params, inst.scalars))
        c_args, c_types = [], []
        buffer_index = 0
        for param in kernel.module.params:
            if param.kind == "buffer":
                c_args.append(f"(void*)({self.pointer(values[buffer_index])})")
                c_types.append("void*")
                buffer_index += 1
            elif param.kind == "scalar":
                c_args.append(f"({param.c_type})({self.expr(scalars[param.obj])})")
                c_types.append(param.c_type)
            else:
                c_args.append(f"({param.c_type})({self.size_value(param.obj, buffers, shapes, by_buffer, inst)})")
                c_types.append(param.c_type)
        self.kernel_calls += 1
        entry = f"((int32_t (*)({', '.join(c_types) or 'void'}))fns[{2 * index}])"
        message = f"((const char* (*)(int32_t))fns[{2 * index + 1}])"
        return [f"code = {entry}({', '.join(c_args)});",
                "if (code != 0) {",
                *["    " + x for x in self.fail_block(RUNTIME_FAILURE, f"{func.name}: kernel failed with code %d: %s",
                                                        "(int)code", f"{message}(code)")],
                "}"]

    def size_value(self, var, buffers, shapes, by_buffer, inst) -> str:
        for b in buffers:
            for axis, dim in enumerate(shapes[b].shape):
                if dim is var:
                    return by_buffer[b][2][axis]
        if var in self.names:
            return self.names[var]
        raise Unsupported(f"kernel {inst.kernel}: size var {var.name} is not a dim of any of its buffers")

    def call_blas(self, inst: V.CallPacked) -> list[str]:
        if inst.symbol not in BLAS_EXTERNS or inst.symbol in self.externs:
            raise Unsupported(f"calls the Python extern {inst.symbol}")
        transposed = BLAS_EXTERNS[inst.symbol]
        a, b = (self.tensor(r, f"an argument of {inst.symbol}") for r in inst.args)
        (out,) = (self.tensor(r, f"the output of {inst.symbol}") for r in inst.outs)
        if a[3] != "float32" or b[3] != "float32" or out[3] != "float32":
            raise Unsupported(f"{inst.symbol} on non-float32 tensors")
        self.uses_blas = True
        pa, pb, po = (self.pointer(r) for r in (*inst.args, *inst.outs))
        a_dims, b_dims, o_dims = a[2], b[2], out[2]
        k, n = a_dims[-1], o_dims[-1]
        if len(b_dims) > 2:
            count = " * ".join(a_dims[:-2]) or "1"
            m = a_dims[-2]
        else:
            count, m = "1", (" * ".join(a_dims[:-1]) or "1")
        ldb = "k" if transposed else "n"
        trans_b = 112 if transposed else 111
        b_step = "k" if transposed else "INT64_C(1)"
        return ["{",
                f"    const int64_t count = {count}, m = {m}, k = {k}, n = {n}, ldb = {ldb};",
                f"    const float* a = (const float*)({pa}); const float* b = (const float*)({pb});",
                f"    float* c = (float*)({po}); const int trans_b = {trans_b};",
                "    const rcg_sgemm_t sgemm = (rcg_sgemm_t)fns[0+nk];",
                "    const int parts = rcg_threads();",
                "    const int large = count * m * n * k >= RCG_SHARE_MIN_MNK;",
                "    if (m == 0 || n == 0) {",
                "    } else if (k == 0) {",
                "        memset(c, 0, (size_t)(count * m * n) * sizeof(float));",
                "    } else if (count > 1 && parts > 1 && count >= parts && large) {",
                "        RCG_PARALLEL_FOR",
                "        for (int64_t i = 0; i < count; ++i)",
                "            sgemm(101, 111, trans_b, m, n, k, 1.0f, a + i * m * k, k, b + i * k * n, ldb, 0.0f,",
                "                  c + i * m * n, n);",
                "    } else if (count == 1 && parts > 1 && large && n >= 32 * parts) {",
                "        /* output columns in blocks of whole 16-float vectors, one block per thread */",
                "        RCG_PARALLEL_FOR",
                "        for (int p = 0; p < parts; ++p) {",
                "            const int64_t lo = p == 0 ? 0 : rcg_min(n, (n * p / parts + 15) / 16 * 16);",
                "            const int64_t hi = p == parts - 1 ? n : rcg_min(n, (n * (p + 1) / parts + 15) / 16 * 16);",
                "            if (hi > lo)",
                f"                sgemm(101, 111, trans_b, m, hi - lo, k, 1.0f, a, k, b + lo * {b_step}, ldb, 0.0f,",
                "                      c + lo, n);",
                "        }",
                "    } else {",
                "        for (int64_t i = 0; i < count; ++i)",
                "            sgemm(101, 111, trans_b, m, n, k, 1.0f, a + i * m * k, k, b + i * k * n, ldb, 0.0f,",
                "                  c + i * m * n, n);",
                "    }",
                "}"]

    def pointer(self, reg: int) -> str:
        return self.regs[reg][1]

    def assemble(self, checks: list[str], main: list[str]) -> CGraphSource:
        result = self.regs.get(self.result)
        if result is None:
            raise Unsupported("the result is not a tensor or a tuple of tensors")
        returns_tuple = result[0] == "tuple"
        output_regs = [self._alloc_reg_of(r) for r in (result[1] if returns_tuple else [self.result])]
        if len(set(output_regs)) != len(output_regs):
            raise Unsupported("the same tensor is returned twice")
        alloc_by_reg = dict(self.allocs)
        for r in output_regs:
            if r not in alloc_by_reg or alloc_by_reg[r].token is not None:
                raise Unsupported("the result is an argument, a constant or a planned intermediate")
        symbol = mangle(self.f.name, "rcg_graph_")
        lines = [_PRELUDE, _profile_section(symbol, len(self.call_sites)),
                 f"const char* {symbol}_message(void) {{ return rcg_message; }}",
                 f"int32_t {symbol}(const int64_t* shapes, void* const* inputs, void* const* consts, "
                 "const rcg_fn* fns, void* const* outputs, int64_t* out_shapes, uint8_t* arena, "
                 "int64_t arena_bytes, int64_t* arena_need, int32_t dry_run) {",
                 "    int32_t code = 0;", "    (void)inputs; (void)consts; (void)fns; (void)outputs; (void)code;"]
        lines += ["    " + x for x in self.lines + checks]
        # the arena: one slot per storage token (the largest tensor it holds), one per unplanned intermediate
        tokens = len(self.f.token_bytes)
        lines.append("    int64_t offset = 0;")
        for t in range(tokens):
            lines.append(f"    int64_t token_{t} = 0;")
        outputs = {r: j for j, r in enumerate(output_regs)}
        out_specs = []
        layout = []

        for reg, alloc in self.allocs:
            dims = self.regs[reg][2]
            count = " * ".join(f"({d})" for d in dims) or "INT64_C(1)"
            need = f"({count}) * {_itemsize(alloc.dtype)}"
            if reg in outputs:
                j = outputs[reg]
                base = sum(len(self.regs[r][2]) for r in output_regs[:j])
                lines += [f"    out_shapes[{base + a}] = {d};" for a, d in enumerate(dims)]
                out_specs.append((j, len(dims), alloc.dtype))
                layout.append(f"    void* rcg_tensor_{reg} = outputs[{j}];")
            elif alloc.token is not None:
                limit = self.f.token_limits[alloc.token] if alloc.token < len(self.f.token_limits) else None
                lines.append(f"    {{ const int64_t need = {need};")
                if limit is not None:
                    shape_dims = ", ".join(dims) or "0"
                    lines += [
                        f"      if (need > INT64_C({int(limit)})) {{",
                        f"        const int64_t dims[] = {{{shape_dims}}}; char shape[256];",
                        f"        rcg_shape_text(shape, sizeof shape, dims, {len(dims)});",
                        *["        " + x for x in self.fail_block(
                            ABOVE_BOUND, f"{self.f.name}: a tensor of shape %s needs %lld bytes, more than the "
                            f"{int(limit)} bytes planned from the declared upper bounds (tir_var_upper_bound)",
                            "shape", "(long long)need")],
                        "      }"]
                lines.append(f"      if (need > token_{alloc.token}) token_{alloc.token} = need; }}")
                layout.append(f"    void* rcg_tensor_{reg} = arena + offset_token_{alloc.token};")
            else:
                lines.append(f"    const int64_t offset_{reg} = offset; offset += rcg_align({need});")
                layout.append(f"    void* rcg_tensor_{reg} = arena + offset_{reg};")
        for t in range(tokens):
            lines.append(f"    const int64_t offset_token_{t} = offset; offset += rcg_align(token_{t});")
        lines += ["    *arena_need = offset;", "    if (dry_run) return 0;",
                  "    if (arena_bytes < offset) {",
                  *["        " + x for x in self.fail_block(
                      RUNTIME_FAILURE, "the arena has %lld bytes, the call needs %lld",
                      "(long long)arena_bytes", "(long long)offset")],
                  "    }"]
        lines += layout
        lines.append("    RCG_PROFILE_START();")
        nk = 2 * len(self.kernel_order)
        lines += ["    " + x.replace("fns[0+nk]", f"fns[{nk}]") for x in main]
        lines += ["    return 0;", "}", ""]
        out_specs.sort()
        return CGraphSource(self.f.name, symbol, "\n".join(lines), self.inputs,
                            [(ndim, dtype) for _, ndim, dtype in out_specs], returns_tuple, self.constants,
                            [self.kernels[k] for k in self.kernel_order], self.uses_blas, self.kernel_calls,
                            self.f.param_names, tuple(self.call_sites))

    def _alloc_reg_of(self, reg: int) -> int:
        value = self.regs.get(reg)
        if value is None or value[0] != "tensor":
            raise Unsupported("the result is not a tensor or a flat tuple of tensors")
        if value[4] is None:
            raise Unsupported("the result is an argument or a constant")
        return value[4]


def lower_to_c(function: V.VMFunction, kernels: dict[str, Callable],
               externs: dict[str, Callable] | None = None) -> CGraphSource:
    """The C source of one VM function, or Unsupported with the reason it needs the VM."""
    return _Lowering(function, kernels, dict(externs or {})).lower()
