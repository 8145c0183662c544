"""The pass pipeline behind `refcomp.graph.build`: a graph module to an executable.

    ex = refcomp.graph.build(mod, target="c")
    vm = refcomp.runtime.VirtualMachine(ex)

Pipeline (each a pure IRModule -> IRModule pass; the IR after each is logged at DEBUG level on
the "refcomp.graph" logger): normalize, split_to_slices, (convert_layout: layouts,)
(dispatch_blas,) sink_reshapes, legalize_ops, canonicalize_bindings, fold_constant,
dead_code_elimination, fuse_ops + fuse_tir (fuse=True), rewrite_reshape_views (a kernel that only
reshapes becomes a view of its input), dead_code_elimination, (mark_constant_params,) default_schedule
(schedule=True), fold_packed_weights + dead_code_elimination (schedule and fold: constant weights
packed at build time), plan_memory, then lower_to_vm and kernel compilation; then each graph function is compiled to one C
function where it can (lower_to_c, spec/graph_c.md), else the VM runs it (ex.executor says why).  The target vocabulary is refcomp.build's
(spec/targets.md): a "c" target, with any of its options, compiles each PrimFunc with refcomp.build
for that target; "interpret" runs kernels in the reference interpreter (slow; for testing).  The
graph's kernels get CPU schedules, so "cuda" is not a graph target.  bounds has refcomp.build's
modes and default ("runtime": proved, or checked at run time).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ..ast.function import IRModule, PrimFunc
from ..ast.graph import Function
from ..driver import DEFAULT_BOUNDS, check_bounds_mode
from ..driver import build as build_kernel
from ..errors import BuildError
from ..runtime.threads import prefer_short_openmp_spins
from ..runtime.vm import Executable
from ..target import Target, parse_target
from . import passes as P

log = logging.getLogger("refcomp.graph")

TARGET_KINDS = ("c", "interpret")
EXECUTORS = ("auto", "compiled", "vm")


def default_pipeline(fuse: bool = True, schedule: bool = True, fold: bool = True,
                     blas: bool | str = False, tuning_database: Any = None,
                     target: str = "c", layouts: bool | str = "auto") -> list[tuple[str, Callable]]:
    """The passes graph.build runs, in order, as (name, pass) pairs (blas, tuning_database, layouts: see build)."""
    from .passes.split_to_slices import split_to_slices

    from .passes.fold_reshapes import fold_reshapes

    pipeline = [("normalize", P.normalize), ("split_to_slices", split_to_slices), ("fold_reshapes", fold_reshapes)]
    if layouts:
        from functools import partial

        from .passes.convert_layout import convert_layout

        pipeline.append(("convert_layout", partial(convert_layout, regions="depthwise" if layouts == "auto" else "all")))
    if blas:
        from functools import partial

        from .passes.dispatch_blas import dispatch_blas

        pipeline.append(("dispatch_blas", partial(dispatch_blas, mode="always") if blas == "always" else dispatch_blas))
    from .passes.sink_reshapes import sink_reshapes

    pipeline += [("sink_reshapes", sink_reshapes), ("legalize_ops", P.legalize_ops),
                ("canonicalize_bindings", P.canonicalize_bindings)]
    if fold:
        pipeline.append(("fold_constant", P.fold_constant))
    pipeline.append(("dead_code_elimination", P.dead_code_elimination))
    if fuse:
        from .passes.fuse_ops import fuse_ops
        from .passes.fuse_tir import fuse_tir

        pipeline += [("fuse_ops", fuse_ops), ("fuse_tir", fuse_tir)]
    from .passes.reshape_views import rewrite_reshape_views

    pipeline += [("rewrite_reshape_views", rewrite_reshape_views), ("dead_code_elimination", P.dead_code_elimination)]
    if schedule:
        from .passes.default_schedule import default_schedule, prepare_kernels

        pipeline.append(("prepare_kernels", prepare_kernels))
        if tuning_database is not None:
            from functools import partial

            from .passes.apply_tuning import apply_tuning_records

            pipeline.append(("apply_tuning_records",
                             partial(apply_tuning_records, database=tuning_database, target=target)))
        if fold:
            from .passes.fold_packed_weights import fold_packed_weights, mark_constant_params

            pipeline.append(("mark_constant_params", mark_constant_params))
        pipeline.append(("default_schedule", default_schedule))
        if fold:

            pipeline += [("fold_packed_weights", fold_packed_weights),
                         ("dead_code_elimination", P.dead_code_elimination)]  # the kernels no call uses now
    pipeline.append(("plan_memory", P.plan_memory))
    return pipeline


def optimize(mod: IRModule, *, fuse: bool = True, schedule: bool = True, fold: bool = True,
             blas: bool | str = False, tuning_database: Any = None, target: str = "c",
             layouts: bool | str = "auto") -> IRModule:
    """Run the default pipeline (without compiling kernels)."""
    for name, run in default_pipeline(fuse, schedule, fold, blas, tuning_database, target, layouts):
        mod = run(mod)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("IR after %s:\n%s", name, _show(mod))
    return mod


def resolve_blas(blas: bool | str | None, target_kind: str) -> bool | str:
    """What build's `blas` argument comes to on a target kind: None (the default) sends matmuls to
    OpenBLAS's sgemm when the kind is "c" and the library is found; True and "always" whenever it is
    found; False never.  refcomp.tune's model tuning resolves it the same way, so that it tunes the
    kernels build makes."""
    if blas is None or blas:
        from ..runtime.blas import register_blas

        found = register_blas() if (blas or target_kind == "c") else False
        return ("always" if blas == "always" else True) if found else False
    return False


def build(mod: IRModule | Function, target: str | Target = "c", *, fuse: bool = True, schedule: bool = True,
          fold: bool = True, bounds: str = DEFAULT_BOUNDS, externs: dict[str, Callable] | None = None,
          blas: bool | str | None = None, executor: str = "auto", tuning_database: Any = None,
          layouts: bool | str = "auto") -> Executable:
    """Compile a graph module (or one Function, named main) to a VM Executable.

    blas: send float32 matmul/dense/linear to numpy's OpenBLAS sgemm (default: when target is "c"
    and the library is found), except the linears refcomp's own GEMM runs faster with their
    epilogue in the tile (dispatch_blas mode "auto"); "always" sends all of them.  bounds is
    refcomp.build's (each kernel is built with it): "runtime" (the default), "prove" or "off".
    executor: "auto" (the default) compiles each graph function to one C function where it can
    (spec/graph_c.md) and leaves the rest to the VM, logging why; "compiled" requires it (a
    BuildError names the reason); "vm" always interprets.  `ex.executor` says which runs main.
    tuning_database: kernels it holds records of (`schedule_for(func, target)`, as
    refcomp.tune.Database has) get their best tuned schedule instead of the default one;
    `ex.stats["tuned_kernels"]` counts them.
    layouts: convolution chains run in the channel-blocked layout NCHW{L}c, converted back at
    their edges (passes.convert_layout, spec/graph.md 5.2): "auto" (the default) the chains with a
    depthwise convolution (where it measured faster), True every chain it takes, False none.
    """
    if layouts not in (True, False, "auto"):
        raise BuildError(f"graph.build: layouts must be True, False or 'auto', got {layouts!r}")
    if executor not in EXECUTORS:
        raise BuildError(f"graph.build: executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if isinstance(mod, Function):
        mod = IRModule({"main": mod})
    parsed = parse_target(target, kinds=TARGET_KINDS, what="graph.build")
    check_bounds_mode(bounds, "graph.build")
    compiled_kernels = parsed.kind == "c"
    if compiled_kernels:
        prefer_short_openmp_spins()
    blas = resolve_blas(blas, parsed.kind)
    if tuning_database is not None:
        from .passes.apply_tuning import check_tuning_database

        check_tuning_database(tuning_database)
    optimized = optimize(mod, fuse=fuse, schedule=schedule, fold=fold, blas=blas, tuning_database=tuning_database,
                         target=str(parsed), layouts=layouts)
    functions = P.lower_to_vm(optimized)
    used = {inst.kernel for f in functions.values() for inst in _walk(f.code) if type(inst).__name__ == "CallKernel"}
    for name in used:
        if not isinstance(optimized[name], PrimFunc):
            raise BuildError(f"graph.build: call_tir target {name} is not a PrimFunc")
    names = sorted(used)
    if compiled_kernels and len(names) > 1:
        # gcc runs in subprocesses, so threads compile kernels in parallel.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
            compiled = list(pool.map(lambda n: _compile(optimized[n], parsed, bounds), names))
    else:
        compiled = [_compile(optimized[n], parsed, bounds) for n in names]
    kernels = dict(zip(names, compiled))
    stats = {"kernels": len(kernels),
             "kernel_calls_static": sum(1 for f in functions.values() for i in _walk(f.code)
                                        if type(i).__name__ == "CallKernel"),
             "tuned_kernels": sum(1 for n in names if optimized[n].attrs.get("tuned"))}
    ex = Executable(functions, kernels, dict(externs or {}), str(parsed), stats, optimized)
    if executor != "vm":
        _compile_graph_functions(ex, parsed, executor == "compiled")
    return ex


def _compile_graph_functions(ex: Executable, target: Target, required: bool) -> None:
    """Compile each graph function to C where it can (ex.compiled); record the executor and why."""
    from ..emit_c import compile_shared
    from ..runtime.blas import sgemm_address
    from ..runtime.graph_function import CompiledGraphFunction
    from .passes.lower_to_c import Unsupported, lower_to_c

    for name, function in ex.functions.items():
        try:
            if target.kind != "c":
                raise Unsupported(f"kernels run in the {target.kind} target, not compiled C")
            lowered = lower_to_c(function, ex.kernels, ex.externs)
            blas = sgemm_address() if lowered.uses_blas else None
            if lowered.uses_blas and blas is None:
                raise Unsupported("the BLAS externs are not registered")
        except Unsupported as why:
            reason = f"vm: {why}"
            if required:
                raise BuildError(f"graph.build: {name} cannot be compiled to C ({why})",
                                 hint="use executor='auto' to run it in the VM") from None
            ex.executors[name] = reason
            log.info("graph function %s runs in the %s", name, reason)
            continue
        try:
            path = compile_shared(lowered.source, target, f"graph_{name}")
        except BuildError as exc:
            if required:
                raise
            ex.executors[name] = f"vm: the graph function does not compile for {target}: {exc}".split("\n")[0]
            log.warning("graph function %s runs in the %s", name, ex.executors[name])
            continue
        ex.compiled[name] = CompiledGraphFunction(
            path, lowered.symbol, name, lowered.inputs, lowered.outputs, lowered.returns_tuple,
            lowered.constants, lowered.kernels, blas, lowered.kernel_calls, lowered.param_names, target,
            lowered.source, lowered.call_sites)
        ex.executors[name] = "compiled"


def _compile(func: PrimFunc, target: Target, bounds: str) -> Callable[..., Any]:
    try:
        return build_kernel(func, target=target, bounds=bounds)
    except BuildError:
        raise
    except Exception as exc:  # surface toolchain or lowering failures as a BuildError naming the kernel
        raise BuildError(f"graph.build: compiling kernel {func.name} failed: {type(exc).__name__}: {exc}") from exc


def _walk(code):
    for inst in code:
        yield inst
        if type(inst).__name__ == "Branch":
            yield from _walk(inst.then_code)
            yield from _walk(inst.else_code)


def _show(mod: IRModule) -> str:
    try:
        return mod.script()
    except Exception as exc:  # logging must never break a build
        return f"(module could not be printed: {exc})"
