"""The CUDA emitter: a prepared PrimFunc (kernels in normal form, barriers placed) -> CUDA C++.

The expression and statement printing of the C emitter is reused as it is (strict-C mode: no GCC
vector extensions, vectors are emitted lane by lane), so the integer, cast, NaN and half-precision
rules are the same on both targets.  What differs is here:

* every kernel root becomes a `__global__` function; its launch (grid and block sizes computed on
  the host from the size variables) is emitted where the kernel stood in the host code;
* `shared` allocations become `__shared__` arrays declared at the top of the kernel, `local` ones
  per-thread arrays (both need constant sizes), global allocations in host code `cudaMalloc`;
* a barrier is `__syncthreads()`;
* a failed assertion inside a kernel records its code in a device status word and ends the thread;
  the host reads the word after the launches and returns it.

The exported host function follows spec/c_abi.md with *device* pointers for buffers; spec/cuda.md
describes the launcher and its helpers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..version import __version__
from ..ast import expr as E
from ..ast import stmt as S
from ..ast.buffer import Buffer
from ..ast.dtype import int64
from ..ast.function import PrimFunc
from ..ast.functor import collect, free_vars
from ..emit_c import (
    FIRST_ASSERT_CODE, HEADER_INCLUDES, CFamilyEmitter, CParam, EmitOptions, FailureScope, c_string,
    comment_safe, scalar_prelude, storage_type, symbol_suffix, unit_ramp_base, value_type,
)
from ..errors import BuildError
from .barriers import SYNC_OP
from .kernel import hoist_shared_allocations, is_on_chip, kernel_shape

LAUNCH_FAILED = FIRST_ASSERT_CODE - 1 + 1000  # far from the assertion codes
CUDA_OPTIONS = EmitOptions(vectors=False, openmp=False, label="cuda")
_DIM_FIELDS = ("x", "y", "z")


@dataclass
class CudaModule:
    """An emitted CUDA translation unit and what the loader needs to call it."""

    source: str
    func_name: str
    symbol: str
    message_symbol: str
    params: tuple[CParam, ...]
    kernel_names: tuple[str, ...]
    messages: dict[int, str] = field(default_factory=dict)
    pointer_alignment: int = 1  # bytes every buffer pointer must be aligned to (vector accesses)
    launch_failed_code: int = LAUNCH_FAILED  # the status a failed launch or CUDA call returns

    def cdef(self) -> str:
        args = ", ".join(f"{p.c_type} {p.c_name}".replace(" __restrict__", "") for p in self.params)
        return (f"int32_t {self.symbol}({args or 'void'});\n"
                f"const char* {self.message_symbol}(int32_t code);\n"
                f"int32_t {self.symbol}_device_count(void);\n"
                f"void* {self.symbol}_alloc(size_t bytes);\n"
                f"int32_t {self.symbol}_free(void* pointer);\n"
                f"int32_t {self.symbol}_copy(void* dst, const void* src, size_t bytes, int32_t to_device);\n")


def emit_cuda(func: PrimFunc, size_vars: list[E.Var]) -> CudaModule:
    """CUDA source of a prepared PrimFunc (see refcomp.emit_cuda.prepare)."""
    return _CudaEmitter(func, size_vars).run_cuda()


def _device_prelude() -> str:
    # The C helpers, callable from host and device code alike.
    return scalar_prelude().replace("static inline ", "static __host__ __device__ inline ")


class _CudaEmitter(CFamilyEmitter):
    statement_expressions_always = True  # nvcc takes them in host and device code

    def __init__(self, func: PrimFunc, size_vars: list[E.Var]) -> None:
        super().__init__(func, CUDA_OPTIONS, size_vars)
        self.device = False
        self.kernels: list[list[str]] = []
        self.kernel_names: list[str] = []
        self.symbol = f"refcomp_{symbol_suffix(func.name)}"
        self.loop_ranges: list[tuple[E.Var, E.PrimExpr, E.PrimExpr]] = []
        self.pointer_alignment = 1
        self.messages[LAUNCH_FAILED] = "a CUDA launch or kernel failed (see the CUDA error text)"

    # ------------------------------------------------------------------ driver
    def run_cuda(self) -> CudaModule:
        func = self.func
        self.names.reserve(self.symbol)
        params, size_locals = self._parameters("__restrict__")
        root = FailureScope("rc_exit", parallel=False)
        self.scopes.append(root)
        self.status_used = True
        self.stmt(func.body)
        host_body, self.lines = self.lines, []

        out = [f"/* {comment_safe(func.name)}: host launcher, see spec/cuda.md */",
               f'extern "C" int32_t {self.symbol}({", ".join(f"{p.c_type} {p.c_name}" for p in params) or "void"}) {{',
               "    int32_t rc_status = 0;"]
        out.extend(f"    (void){p.c_name};" for p in params)
        out.extend("    " + line for line in size_locals)
        out.append("    rc_reset_device_status();")
        out.extend(host_body)
        out.append("    if (rc_status == 0) rc_status = rc_finish();")
        out.append("rc_exit:")
        out.append("    return rc_status;")
        out.append("}")
        source = self._assemble_cuda(out, params)
        return CudaModule(source, func.name, self.symbol, f"{self.symbol}_message", tuple(params),
                          tuple(self.kernel_names), dict(self.messages), self.pointer_alignment)

    def _assemble_cuda(self, host: list[str], params: list[CParam]) -> str:
        head = [f"/* Generated by refcomp {__version__} from PrimFunc {comment_safe(repr(self.func.name))} "
                "for target 'cuda'. */",
                "#include <cuda_runtime.h>", "#include <stdio.h>",
                *(f"#include <{h}>" for h in HEADER_INCLUDES)]
        runtime = _RUNTIME.replace("SYMBOL", self.symbol)
        messages = [f'extern "C" const char* {self.symbol}_message(int32_t code) {{',
                    f"    if (code == {LAUNCH_FAILED}) return rc_last_cuda_error;",
                    "    switch (code) {", '    case 0: return "ok";']
        messages += [f"    case {code}: return {c_string(text)};" for code, text in sorted(self.messages.items())]
        messages += ['    default: return "unknown error code";', "    }", "}"]
        head.extend(f"#include <{h}>" for h in _includes(self.func))
        parts = ["\n".join(head), _device_prelude().rstrip("\n"), runtime.strip("\n")]
        parts.extend(h.strip("\n") for h in _helpers(self.func))
        vector_text = self.vec.text()
        if vector_text:
            parts.append(vector_text.replace("static inline ", "static __host__ __device__ inline ").rstrip("\n"))
        parts.extend("\n".join(k) for k in self.kernels)
        parts.append("\n".join(host))
        parts.append("\n".join(messages))
        return "\n\n".join(parts) + "\n"

    # ------------------------------------------------------------------ host statements
    def stmt_For(self, s: S.For) -> None:
        if s.kind == "thread_binding":
            if self.device:
                raise BuildError("cuda: a thread-bound loop inside a kernel body (the kernel is not in "
                                 "normal form)", ir=self.func, spot=s)
            self.emit_kernel(s)
            return
        if s.kind == "parallel":
            raise BuildError(f"cuda: loop {s.loop_var.name} is marked parallel; on the GPU bind it to "
                             "blockIdx/threadIdx instead", ir=self.func, spot=s)
        if self.device:
            self.loop_ranges.append((s.loop_var, s.min, s.extent))
            try:
                self._device_loop(s)
            finally:
                self.loop_ranges.pop()
            return
        super().stmt_For(s)

    def _device_loop(self, s: S.For) -> None:
        if s.kind in ("unrolled", "vectorized"):
            extent = E.as_int(s.extent)
            if extent is not None and 0 < extent <= 1024:
                self.pragma(f"#pragma unroll {extent}" if s.kind == "unrolled" else "#pragma unroll")
            s = s.with_(kind="serial")
        super().stmt_For(s)

    def stmt_Allocate(self, s: S.Allocate) -> None:
        buffer = s.buffer
        if self.device:
            if buffer.scope.startswith("shared"):
                raise BuildError("cuda: internal: shared allocation not hoisted", ir=self.func, spot=s)
            count = self.constant_size(buffer, s)
            name = self.names.name_of(buffer, buffer.name)
            self.buffers[buffer] = name
            self.line("{")
            self.depth += 1
            self.line(f"{storage_type(buffer.dtype)} {name}[{max(count, 1)}];")
            self.stmt(s.body)
            self.depth -= 1
            self.line("}")
            return
        if is_on_chip(buffer.scope):
            raise BuildError(f"cuda: {buffer.name} ({buffer.scope}) is allocated outside any kernel",
                             ir=self.func, spot=s)
        name = self.names.name_of(buffer, buffer.name)
        self.buffers[buffer] = name
        st = storage_type(buffer.dtype)
        size = " * ".join(f"(size_t)({self.index(d)})" for d in buffer.shape) or "1"
        self.line("{")
        self.depth += 1
        self.line(f"{st}* {name} = NULL;")
        self.heap_scope(name, f"cudaMalloc((void**)&{name}, sizeof({st}) * ({size}) + 1) != cudaSuccess",
                        f"cudaFree({name});", s.body)
        self.depth -= 1
        self.line("}")

    def stmt_BufferStore(self, s: S.BufferStore) -> None:
        if self.device and self.vector_copy(s):
            return
        super().stmt_BufferStore(s)

    def vector_copy(self, s: S.BufferStore) -> bool:
        """A contiguous copy of 2 or 4 floats between aligned addresses as one float2/float4 access."""
        value = s.value
        lanes = value.dtype.lanes
        if lanes not in (2, 4) or value.dtype.element.name != "float32" or not isinstance(value, E.BufferLoad):
            return False
        if value.buffer.dtype.name != "float32" or s.buffer.dtype.name != "float32":
            return False
        destination, source = unit_ramp_base(s.indices[0]), unit_ramp_base(value.indices[0])
        if destination is None or source is None or len(s.indices) != 1 or len(value.indices) != 1:
            return False
        if not (_aligned(destination, lanes, self.loop_ranges) and _aligned(source, lanes, self.loop_ranges)):
            return False
        vector = f"float{lanes}"
        # Aligned relative to the buffer start: the launcher checks the pointers themselves.
        self.pointer_alignment = max(self.pointer_alignment, 4 * lanes)
        self.line(f"*({vector}*)(&{self.buffer_name(s.buffer)}[{self.index(destination)}]) = "
                  f"*(const {vector}*)(&{self.buffer_name(value.buffer)}[{self.index(source)}]);")
        return True

    def constant_size(self, buffer: Buffer, where: S.Stmt) -> int:
        count = 1
        for dim in buffer.shape:
            value = E.as_int(dim)
            if value is None:
                raise BuildError(f"cuda: {buffer.name} ({buffer.scope}) needs a constant size on the GPU, "
                                 f"got shape ({', '.join(map(repr, buffer.shape))})", ir=self.func, spot=where)
            count *= max(value, 0)
        return count

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        if isinstance(s.value, E.Call) and s.value.op == SYNC_OP:
            if not self.device:
                raise BuildError("cuda: a barrier outside any kernel", ir=self.func, spot=s)
            self.line("__syncthreads();")
            return
        if isinstance(s.value, E.Call) and s.value.op == "prefetch":
            return  # a CPU cache hint: nothing to do on the GPU
        super().stmt_Evaluate(s)

    def expr_Call(self, e: E.Call, lane) -> str:
        if e.op == "warp_reduce":
            if not self.device:
                raise BuildError("cuda: warp_reduce outside a kernel", ir=self.func, spot=e)
            op, value, width = e.args
            tag = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}.get(e.dtype.name)
            if tag is None or e.dtype.lanes != 1:
                raise BuildError(f"cuda: warp_reduce of {e.dtype} is not supported", ir=self.func, spot=e)
            lanes = E.as_int(width)
            if lanes not in (2, 4, 8, 16, 32):
                raise BuildError(f"cuda: warp_reduce over {width} lanes (expected 2, 4, 8, 16 or 32)",
                                 ir=self.func, spot=e)
            return f"rc_warp_{op.value}_{tag}({self.expr(value)}, {lanes})"
        return super().expr_Call(e, lane)

    def fail(self, code: int) -> None:
        if not self.device:
            super().fail(code)
            return
        self.line(f"rc_set_device_status({code});")
        self.line("return;")

    # ------------------------------------------------------------------ kernels
    def emit_kernel(self, root: S.For) -> None:
        shape = kernel_shape(root)
        index = len(self.kernels)
        kernel_name = self.names.fresh(f"{self.symbol}_kernel{index}")
        self.kernel_names.append(kernel_name)
        body, shared = hoist_shared_allocations(shape.body)
        axis_vars = {var for _, var, _ in shape.axes}
        buffers = _buffers_used(root, self.buffers)
        local = {a.buffer for a in collect(body, S.Allocate)} | {a.buffer for a in shared}
        args: list[tuple[str, str]] = []
        for buffer in buffers:
            if buffer in local:
                continue
            if buffer not in self.buffers:
                raise BuildError(f"cuda: kernel uses buffer {buffer.name} that is not allocated in host code",
                                 ir=self.func, spot=root)
            args.append((f"{storage_type(buffer.dtype)}* __restrict__", self.buffers[buffer]))
        for var in free_vars(root):
            if var in axis_vars:
                continue
            args.append((value_type(var.dtype), self.expr(var)))
        threads = 1
        for tag, _, extent in shape.axes:
            if tag.startswith("threadIdx"):
                threads *= E.as_int(extent) or 1

        saved = (self.lines, self.depth, self.scopes)
        self.lines, self.depth, self.scopes = [], 1, [FailureScope("rc_kernel_exit", parallel=False)]
        self.device = True
        try:
            for tag, var, _ in shape.axes:
                name = self.names.name_of(var, var.name)
                self.line(f"const {value_type(var.dtype)} {name} = ({value_type(var.dtype)}){tag};")
            for alloc in shared:
                count = self.constant_size(alloc.buffer, alloc)
                name = self.names.name_of(alloc.buffer, alloc.buffer.name)
                self.buffers[alloc.buffer] = name
                self.line(f"__shared__ {storage_type(alloc.buffer.dtype)} {name}[{max(count, 1)}];")
            self.stmt(body)
        finally:
            kernel_lines = self.lines
            self.lines, self.depth, self.scopes = saved
            self.device = False
        signature = ", ".join(f"{t} {n}" for t, n in args) or "void"
        self.kernels.append([f"__global__ void __launch_bounds__({threads}) {kernel_name}({signature}) {{",
                             *kernel_lines, "}"])

        grid = [self.launch_dim(shape, "blockIdx." + d) for d in _DIM_FIELDS]
        block = [self.launch_dim(shape, "threadIdx." + d) for d in _DIM_FIELDS]
        self.line("{")
        self.depth += 1
        self.line(f"const dim3 rc_grid({', '.join(grid)});")
        self.line(f"const dim3 rc_block({', '.join(block)});")
        self.line("if (rc_grid.x > 0 && rc_grid.y > 0 && rc_grid.z > 0) {")
        self.depth += 1
        self.line(f"{kernel_name}<<<rc_grid, rc_block>>>({', '.join(n for _, n in args)});")
        self.line("if (rc_check_launch() != 0) {")
        self.depth += 1
        self.fail(LAUNCH_FAILED)
        self.depth -= 1
        self.line("}")
        self.depth -= 1
        self.line("}")
        self.depth -= 1
        self.line("}")

    def launch_dim(self, shape, tag: str) -> str:
        extent = shape.extent(tag)
        return f"(unsigned)({self.index(extent)})"


_HEADER = re.compile(r"[A-Za-z0-9_./+-]+\Z")
_HOST_ONLY_HEADERS = {"immintrin.h"}  # x86 intrinsics: meaningless in device code


def _includes(func: PrimFunc) -> list[str]:
    """The headers tensor intrinsics asked for (attr c_includes), checked to be plain names."""
    includes = func.attrs.get("c_includes", ())
    includes = (includes,) if isinstance(includes, str) else includes
    out = []
    for header in dict.fromkeys(includes):
        if not isinstance(header, str) or not _HEADER.match(header):
            raise BuildError(f"cuda: attr c_includes: {header!r} is not a plain header name", ir=func)
        if header not in _HOST_ONLY_HEADERS and header not in HEADER_INCLUDES:
            out.append(header)
    return out


def _helpers(func: PrimFunc) -> list[str]:
    """The C/CUDA source tensor intrinsics bring (attr c_helpers), once each."""
    helpers = func.attrs.get("c_helpers", ())
    helpers = (helpers,) if isinstance(helpers, str) else helpers
    for helper in helpers:
        if not isinstance(helper, str):
            raise BuildError(f"cuda: attr c_helpers must hold source strings, got {helper!r}", ir=func)
    return list(dict.fromkeys(helpers))


def _aligned(base: E.PrimExpr, lanes: int, loop_ranges) -> bool:
    """Whether base is provably a multiple of lanes (so a float<lanes> access is aligned)."""
    from ..shape import Analyzer

    analyzer = Analyzer()
    for var, low, extent in loop_ranges:
        analyzer.bind(var, (low, extent))
    return analyzer.can_prove(E.FloorMod(base, E.IntImm(lanes, base.dtype)) == 0)


def _buffers_used(stmt: S.Stmt, known: dict) -> list[Buffer]:
    seen: dict[Buffer, None] = {}
    for node in collect(stmt, E.BufferLoad) + collect(stmt, S.BufferStore):
        seen.setdefault(node.buffer, None)
    return list(seen)


# Device status word and the small runtime every module carries (SYMBOL is the export prefix).
_RUNTIME = r"""
__device__ int32_t rc_device_status;
static char rc_last_cuda_error[256] = "no CUDA error";

static __device__ void rc_set_device_status(int32_t code) {
    atomicCAS((int*)&rc_device_status, 0, (int)code);
}

static void rc_note_cuda_error(cudaError_t err) {
    snprintf(rc_last_cuda_error, sizeof rc_last_cuda_error, "CUDA error %d: %s",
             (int)err, cudaGetErrorString(err));
}

static void rc_reset_device_status(void) {
    int32_t zero = 0;
    cudaMemcpyToSymbol(rc_device_status, &zero, sizeof zero);
}

static int32_t rc_check_launch(void) {
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) { rc_note_cuda_error(err); return 1; }
    return 0;
}

static int32_t rc_finish(void) {
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { rc_note_cuda_error(err); return LAUNCH_CODE; }
    int32_t status = 0;
    err = cudaMemcpyFromSymbol(&status, rc_device_status, sizeof status);
    if (err != cudaSuccess) { rc_note_cuda_error(err); return LAUNCH_CODE; }
    return status;
}

/* Warp reductions over the first `width` lanes (the whole block of width threads): a butterfly of
   shuffles leaves the result in every one of them.  max/min keep
   refcomp's NaN rule through the same helpers as the rest of the kernel. */
#define RC_WARP_REDUCE(name, type, combine) \
static __device__ __forceinline__ type rc_warp_##name(type v, int width) { \
    unsigned mask = width == 32 ? 0xffffffffu : (1u << width) - 1u; \
    for (int offset = width / 2; offset > 0; offset >>= 1) { \
        type other = __shfl_xor_sync(mask, v, offset); \
        v = combine; \
    } \
    return v; \
}
RC_WARP_REDUCE(sum_f32, float, v + other)
RC_WARP_REDUCE(max_f32, float, rc_max_f32(v, other))
RC_WARP_REDUCE(min_f32, float, rc_min_f32(v, other))
RC_WARP_REDUCE(sum_f64, double, v + other)
RC_WARP_REDUCE(max_f64, double, rc_max_f64(v, other))
RC_WARP_REDUCE(min_f64, double, rc_min_f64(v, other))
RC_WARP_REDUCE(sum_i32, int32_t, (int32_t)((uint32_t)v + (uint32_t)other))
RC_WARP_REDUCE(max_i32, int32_t, (v > other ? v : other))
RC_WARP_REDUCE(min_i32, int32_t, (v < other ? v : other))
RC_WARP_REDUCE(sum_i64, int64_t, (int64_t)((uint64_t)v + (uint64_t)other))
RC_WARP_REDUCE(max_i64, int64_t, (v > other ? v : other))
RC_WARP_REDUCE(min_i64, int64_t, (v < other ? v : other))

extern "C" int32_t SYMBOL_device_count(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) { rc_note_cuda_error(err); return -(int32_t)err; }
    return (int32_t)count;
}

extern "C" void* SYMBOL_alloc(size_t bytes) {
    void* pointer = NULL;
    cudaError_t err = cudaMalloc(&pointer, bytes ? bytes : 1);
    if (err != cudaSuccess) { rc_note_cuda_error(err); return NULL; }
    return pointer;
}

extern "C" int32_t SYMBOL_free(void* pointer) {
    cudaError_t err = cudaFree(pointer);
    if (err != cudaSuccess) { rc_note_cuda_error(err); return 1; }
    return 0;
}

extern "C" int32_t SYMBOL_copy(void* dst, const void* src, size_t bytes, int32_t to_device) {
    cudaError_t err = cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) { rc_note_cuda_error(err); return 1; }
    return 0;
}
""".replace("LAUNCH_CODE", str(LAUNCH_FAILED))

__all__ = ["CudaModule", "emit_cuda", "int64"]
