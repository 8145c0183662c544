"""The plan of an export: the model built for portable C99, its graph function as C, and every
size the standalone code needs at the declared upper bounds of the symbolic dims.

Sizes at the bounds:
- the graph arena: one slot per storage token of plan_memory at its limit, one per unplanned
  intermediate at its upper bound, each rounded up to ARENA_ALIGN (the graph function's layout,
  spec/graph_c.md); an intermediate with no finite upper bound is refused;
- kernel scratch: an allocation inside a kernel lives on the stack when its size is constant and
  small (the C emitter's rule), else it comes from the scratch part of the arena, which holds the
  largest sum of such allocations of any one kernel call (kernels run one after another);
- inputs and outputs: each dim at its upper bound.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..ast import expr as tir
from ..ast import stmt as S
from ..ast.function import IRModule
from ..ast.functor import collect, free_vars, substitute
from ..emit_c import EmitOptions, emit
from ..emit_c.codegen import STACK_LIMIT_BYTES
from ..errors import BuildError
from ..graph.passes.lower_to_c import ARENA_ALIGN, CGraphSource, Unsupported, lower_to_c
from ..graph.passes.plan_memory import upper_bound
from ..runtime import vm as V


@dataclass
class TensorSpec:
    """One input or output of the exported model."""

    name: str
    dtype: str
    dims: tuple  # PrimExprs over the size vars
    max_dims: tuple[int, ...]  # each dim at the upper bounds

    @property
    def max_elems(self) -> int:
        return int(np.prod(self.max_dims, dtype=np.int64)) if self.max_dims else 1


@dataclass
class KernelInfo:
    """One kernel of the export: its C (re-emitted as portable C99) and its scratch."""

    name: str
    symbol: str
    message_symbol: str
    source: str
    c_types: tuple[str, ...]
    stack_bytes: int  # constant stack arrays of one call
    scratch_bytes: int = 0  # arena scratch of its largest call at the bounds
    calls: int = 0
    heap: list = field(default_factory=list)  # the buffers its scratch allocator serves
    loaded: Any = None  # the LoadedKernel (its PrimFunc and signature)


@dataclass
class ExportPlan:
    """Everything the C writers need."""

    graph: CGraphSource
    bounds: dict[str, int]
    size_vars: list[tuple[str, int]]  # (name, bound), in order of first appearance in the inputs
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    constants: list[np.ndarray]
    kernels: list[KernelInfo]
    graph_arena_bytes: int
    scratch_bytes: int
    openmp: bool
    module: IRModule | None = None
    executable: Any = None  # the graph.build Executable (the VM records the outputs with it)
    notes: list[str] = field(default_factory=list)

    @property
    def arena_bytes(self) -> int:
        return self.graph_arena_bytes + self.scratch_bytes

    @property
    def weight_bytes(self) -> int:
        return int(sum(c.nbytes for c in self.constants))


@contextmanager
def portable_cpu() -> Iterator[None]:
    """Default schedules as for a CPU with no x86 vector extensions (no intrinsics: portable C),
    through the documented REFCOMP_CPU_FEATURES override; the detected features (and what is
    cached from them) come back afterwards."""
    from ..emit_c.toolchain import native_vector_bytes
    from ..loops.intrin import cpu

    def forget() -> None:
        cpu.cpu_features.cache_clear()
        native_vector_bytes.cache_clear()

    old = os.environ.get("REFCOMP_CPU_FEATURES")
    os.environ["REFCOMP_CPU_FEATURES"] = ""
    forget()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("REFCOMP_CPU_FEATURES", None)
        else:
            os.environ["REFCOMP_CPU_FEATURES"] = old
        forget()


def build_portable(mod: IRModule, schedule: bool):
    """mod built for strict C99 kernels (no intrinsics, no BLAS), run by the VM on the host."""
    from ..graph import build

    with portable_cpu():
        return build(mod, target="c -std=c99", blas=False, executor="vm", schedule=schedule)


def _bound(expr, bounds: dict[str, int], what: str) -> int:
    value = upper_bound(expr, bounds)
    if value is None:
        names = ", ".join(sorted({v.name for v in free_vars(expr)} - set(bounds))) or str(expr)
        raise BuildError(f"export_c: {what} has no upper bound at the declared bounds (depends on {names})",
                         hint="a standalone export needs every size bounded; bound the inputs' symbolic dims")
    return int(value)


def _align(n: int) -> int:
    return (n + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN


class _Fields(tuple):
    """The registers of a tuple built in the function (kept apart from a tuple of dims)."""


def _is_fields(value) -> bool:
    return isinstance(value, _Fields)


def _dims_of_registers(function: V.VMFunction) -> tuple[dict[int, Any], list, Any]:
    """reg -> dims (PrimExprs) or _Fields(regs); the kernel calls with their tensors' dims; the result reg."""
    regs: dict[int, Any] = {}
    calls: list[tuple[V.CallKernel, list]] = []
    result = None
    for inst in function.code:
        kind = type(inst)
        if kind is V.MatchShape and inst.reg < function.num_params and inst.shape is not None:
            regs.setdefault(inst.reg, tuple(inst.shape))
        elif kind is V.Alloc:
            regs[inst.dst] = tuple(inst.shape)
        elif kind is V.LoadConst and isinstance(inst.value, np.ndarray):
            regs[inst.dst] = tuple(tir.IntImm(int(d), "int64") for d in inst.value.shape)
        elif kind is V.Move:
            regs[inst.dst] = regs.get(inst.src)
        elif kind is V.View:
            regs[inst.dst] = tuple(inst.shape)
        elif kind is V.MakeTuple:
            regs[inst.dst] = _Fields(inst.fields)
        elif kind is V.GetItem:
            source = regs.get(inst.src)
            if _is_fields(source):
                regs[inst.dst] = regs.get(source[inst.index])
        elif kind is V.CallKernel:
            calls.append((inst, [regs.get(r) for r in (*inst.args, *inst.outs)]))
        elif kind is V.Return:
            result = inst.reg
    return regs, calls, result


def _on_heap(buffer) -> bool:
    """True when the C emitter allocates buffer at run time (not a constant, small stack array)."""
    count = 1
    for dim in buffer.shape:
        if not isinstance(dim, tir.IntImm):
            return True
        count *= max(int(dim.value), 0)
    return count * buffer.dtype.bytes > STACK_LIMIT_BYTES


def _stack_bytes(buffer) -> int:
    count = 1
    for dim in buffer.shape:
        count *= max(int(dim.value), 0)
    return max(count, 1) * buffer.dtype.bytes


def _heap_in_parallel_loop(lowered) -> bool:
    return any(_on_heap(alloc.buffer) for loop in collect(lowered.body, S.For) if loop.kind == "parallel"
               for alloc in collect(loop.body, S.Allocate))


def make_plan(mod: IRModule, bounds: dict[str, int], *, openmp: bool = False, schedule: bool = True) -> ExportPlan:
    """Build mod for export and size everything at the bounds (BuildError when something is unbounded
    or cannot run as one standalone C function)."""
    ex = build_portable(mod, schedule)
    function = ex.functions["main"]
    try:
        graph = lower_to_c(function, ex.kernels)
    except Unsupported as why:
        raise BuildError(f"export_c: main cannot be compiled to one C function ({why})") from None
    if graph.uses_blas:
        raise BuildError("export_c: the graph calls BLAS, which a standalone export cannot link")
    regs, calls, result = _dims_of_registers(function)

    size_vars: list[tuple[str, int]] = []
    inputs = []
    for reg, (what, ndim, dtype) in enumerate(graph.inputs):
        dims = regs.get(reg)
        if dims is None:
            raise BuildError(f"export_c: {what} has no known shape")
        for dim in dims:
            for var in free_vars(dim):
                if var.name not in [n for n, _ in size_vars]:
                    size_vars.append((var.name, bounds[var.name]))
        name = function.param_names[reg] if reg < len(function.param_names) else f"input{reg}"
        inputs.append(TensorSpec(name, dtype, dims, tuple(_bound(d, bounds, f"dim {a} of input {name}")
                                                          for a, d in enumerate(dims))))
    value = regs.get(result)
    out_regs = list(value) if _is_fields(value) else [result]
    outputs = []
    for j, (reg, (ndim, dtype)) in enumerate(zip(out_regs, graph.outputs)):
        dims = regs.get(reg)
        if dims is None or len(dims) != ndim:
            raise BuildError(f"export_c: output {j} has no known shape")
        outputs.append(TensorSpec(f"output{j}", dtype, dims,
                                  tuple(_bound(d, bounds, f"dim {a} of output {j}") for a, d in enumerate(dims))))

    # the graph arena at the bounds: planned tokens at their limits, unplanned intermediates at theirs
    output_set = set(out_regs)
    arena = 0
    for limit in function.token_limits:
        if limit is None:
            raise BuildError("export_c: a storage token of the memory plan has no upper bound")
        arena += _align(int(limit))
    for inst in function.code:
        if type(inst) is V.Alloc and inst.token is None and inst.dst not in output_set:
            count = tir.IntImm(1, "int64")
            for d in inst.shape:
                count = count * d
            itemsize = 2 if inst.dtype == "bfloat16" else np.dtype(inst.dtype).itemsize
            arena += _align(_bound(count * tir.IntImm(itemsize, "int64"), bounds, "an intermediate tensor"))

    kernels: list[KernelInfo] = []
    options = EmitOptions(vectors=False, openmp=openmp, label="c -std=c99" + (" (OpenMP)" if openmp else ""))
    by_name = {}
    for loaded in graph.kernels:
        lowered = loaded.lowered
        sizes = [p.obj for p in loaded.module.params if p.kind == "size"]
        module = emit(lowered, options, sizes)
        if [p.c_type for p in module.params] != [p.c_type for p in loaded.module.params]:
            raise BuildError(f"export_c: kernel {loaded.func.name}: its portable C has another signature")
        buffers = [alloc.buffer for alloc in collect(lowered.body, S.Allocate)]
        heap = [b for b in buffers if _on_heap(b)]
        stack = [_stack_bytes(b) for b in buffers if not _on_heap(b)]
        if openmp and _heap_in_parallel_loop(lowered):
            raise BuildError(f"export_c: kernel {loaded.func.name} allocates scratch of run-time size inside a "
                             "parallel loop, which a static arena cannot serve per thread",
                             hint="export without openmp")
        info = KernelInfo(loaded.func.name, module.symbol, module.message_symbol, module.source,
                          tuple(p.c_type for p in module.params), int(sum(stack)), heap=heap, loaded=loaded)
        kernels.append(info)
        by_name[loaded.func.name] = info
    for inst, tensor_dims in calls:
        found = by_name.get(ex.kernels[inst.kernel].func.name)
        if found is None:
            continue
        info = found
        info.calls += 1
        heap = info.heap
        if not heap:
            continue
        loaded = info.loaded
        buffers = [p for p in loaded.func.params if not isinstance(p, tir.Var)]
        mapping: dict[str, Any] = {}
        for buf, dims in zip(buffers, tensor_dims):
            if dims is None or _is_fields(dims):
                continue
            for axis, dim in enumerate(loaded.signature.shapes[buf].shape):
                if isinstance(dim, tir.Var) and axis < len(dims):
                    mapping.setdefault(dim.name, dims[axis])
        total = 0
        for buffer in heap:
            count = tir.IntImm(1, "int64")
            for d in buffer.shape:
                count = count * d
            by_var = {v: mapping[v.name] for v in free_vars(count) if v.name in mapping}
            size = substitute(count, by_var) * tir.IntImm(buffer.dtype.bytes, "int64")
            total += _align(_bound(size, bounds, f"scratch buffer {buffer.name} of kernel {info.name}") + 1)
        info.scratch_bytes = max(info.scratch_bytes, total)
    scratch = max((k.scratch_bytes for k in kernels), default=0)
    return ExportPlan(graph, dict(bounds), size_vars, inputs, outputs, list(graph.constants), kernels,
                      arena, scratch, openmp, mod, ex)
