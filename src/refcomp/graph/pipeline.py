"""The pass pipeline behind `refcomp.graph.build`: a graph module to a VM executable.

    ex = refcomp.graph.build(mod, target="c")
    vm = refcomp.runtime.VirtualMachine(ex)

Pipeline (each a pure IRModule -> IRModule pass; the IR after each is logged at DEBUG level on
the "refcomp.graph" logger): normalize, legalize_ops, canonicalize_bindings, fold_constant,
dead_code_elimination, fuse_ops + fuse_tir (fuse=True), default_schedule (schedule=True),
plan_memory, then lower_to_vm and kernel compilation.  target "c" compiles each PrimFunc with
refcomp.build; target "interpret" runs kernels in the reference interpreter (slow; for testing).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ..ast.function import IRModule, PrimFunc
from ..ast.graph import Function
from ..errors import BuildError
from ..runtime.vm import Executable
from . import passes as P

log = logging.getLogger("refcomp.graph")

# A graph run alternates OpenMP kernels with OpenBLAS calls (which have their own thread pool).
# libgomp's default lets idle threads spin, which starves the BLAS threads on small machines
# (measured: 10-50x slower runs on 2 cores); passive waiting avoids that.  Read by libgomp when it
# is first loaded, so it is set before any kernel library is; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
TARGETS = ("c", "interpret")


def default_pipeline(fuse: bool = True, schedule: bool = True, fold: bool = True,
                     blas: bool | str = False) -> list[tuple[str, Callable]]:
    """The passes graph.build runs, in order, as (name, pass) pairs (blas: see build)."""
    pipeline = [("normalize", P.normalize)]
    if blas:
        from functools import partial

        from .passes.dispatch_blas import dispatch_blas

        pipeline.append(("dispatch_blas", partial(dispatch_blas, mode="always") if blas == "always" else dispatch_blas))
    pipeline += [("legalize_ops", P.legalize_ops),
                ("canonicalize_bindings", P.canonicalize_bindings)]
    if fold:
        pipeline.append(("fold_constant", P.fold_constant))
    pipeline.append(("dead_code_elimination", P.dead_code_elimination))
    if fuse:
        from .passes.fuse_ops import fuse_ops
        from .passes.fuse_tir import fuse_tir

        pipeline += [("fuse_ops", fuse_ops), ("fuse_tir", fuse_tir),
                     ("dead_code_elimination", P.dead_code_elimination)]
    if schedule:
        from .passes.default_schedule import default_schedule

        pipeline.append(("default_schedule", default_schedule))
    pipeline.append(("plan_memory", P.plan_memory))
    return pipeline


def optimize(mod: IRModule, *, fuse: bool = True, schedule: bool = True, fold: bool = True,
             blas: bool | str = False) -> IRModule:
    """Run the default pipeline (without compiling kernels)."""
    for name, run in default_pipeline(fuse, schedule, fold, blas):
        mod = run(mod)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("IR after %s:\n%s", name, _show(mod))
    return mod


def build(mod: IRModule | Function, target: str = "c", *, fuse: bool = True, schedule: bool = True,
          fold: bool = True, bounds: str = "off", externs: dict[str, Callable] | None = None,
          blas: bool | str | None = None) -> Executable:
    """Compile a graph module (or one Function, named main) to a VM Executable.

    blas: send float32 matmul/dense/linear to numpy's OpenBLAS sgemm (default: when target is "c"
    and the library is found), except the linears refcomp's own GEMM runs faster with their
    epilogue in the tile (dispatch_blas mode "auto"); "always" sends all of them.  bounds is
    passed to refcomp.build for each kernel.
    """
    if isinstance(mod, Function):
        mod = IRModule({"main": mod})
    if target not in TARGETS:
        raise BuildError(f"graph.build: target must be one of {TARGETS}, got {target!r}")
    if blas is None or blas:
        from ..runtime.blas import register_blas

        found = register_blas() if (blas or target == "c") else False
        blas = ("always" if blas == "always" else True) if found else False
    optimized = optimize(mod, fuse=fuse, schedule=schedule, fold=fold, blas=blas)
    functions = P.lower_to_vm(optimized)
    used = {inst.kernel for f in functions.values() for inst in _walk(f.code) if type(inst).__name__ == "CallKernel"}
    for name in used:
        if not isinstance(optimized[name], PrimFunc):
            raise BuildError(f"graph.build: call_tir target {name} is not a PrimFunc")
    names = sorted(used)
    if target == "c" and len(names) > 1:
        # gcc runs in subprocesses, so threads compile kernels in parallel.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
            compiled = list(pool.map(lambda n: _compile(optimized[n], target, bounds), names))
    else:
        compiled = [_compile(optimized[n], target, bounds) for n in names]
    kernels = dict(zip(names, compiled))
    stats = {"kernels": len(kernels),
             "kernel_calls_static": sum(1 for f in functions.values() for i in _walk(f.code)
                                        if type(i).__name__ == "CallKernel")}
    return Executable(functions, kernels, dict(externs or {}), target, stats, optimized)


def _compile(func: PrimFunc, target: str, bounds: str) -> Callable[..., Any]:
    if target == "interpret":
        from ..loops.interpreter import interpret

        return lambda *arrays: interpret(func, *arrays)
    from ..driver import build as build_kernel

    try:
        return build_kernel(func, target="c", bounds=bounds)
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
