"""refcomp.build: check bounds, lower, emit C, compile (cached) and load a kernel."""
from __future__ import annotations

import importlib

from .ast import stmt as S
from .ast.function import IRModule, PrimFunc
from .ast.functor import collect
from .emit_c import compile_shared, emit, parse_target, size_vars_of
from .errors import BuildError
from .runtime.library import Library

BOUNDS_MODES = ("prove", "runtime", "off")


def _optional(module: str, name: str):
    """A function from another part of refcomp, or None when that part is not installed yet."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _needs_lowering(func: PrimFunc) -> bool:
    if collect(func.body, S.Block) or collect(func.body, S.BlockRealize):
        return True
    return any(len(b.shape) != 1 for b in func.buffers)


def build(func: PrimFunc | IRModule, target: str = "c", bounds: str = "prove") -> Library:
    """Compile a PrimFunc to a callable Library: `lib(a, b, c)` runs it in place on numpy arrays.

    bounds="prove" proves every buffer access in bounds first (ShapeError otherwise);
    "runtime" inserts checks that make the kernel fail with a RuntimeFailure instead;
    "off" trusts the program.
    """
    if isinstance(func, IRModule):
        prims = [f for _, f in func if isinstance(f, PrimFunc)]
        if len(prims) != 1:
            raise BuildError(f"build: expected a PrimFunc or a module with exactly one PrimFunc, "
                             f"got a module with {len(prims)}")
        func = prims[0]
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build: expected a PrimFunc, got {type(func).__name__}")
    if bounds not in BOUNDS_MODES:
        raise BuildError(f"build: bounds must be one of {BOUNDS_MODES}, got {bounds!r}")
    if target.split()[:1] == ["cuda"]:
        from .emit_cuda.build import build_cuda

        return build_cuda(func, target, checked=apply_bounds(func, bounds))
    parsed = parse_target(target)
    checked = apply_bounds(func, bounds)
    lower = _optional("refcomp.loops.lower", "lower")
    if lower is not None:
        lowered = lower(checked)
    elif _needs_lowering(checked):
        raise BuildError("build: this function has blocks or multi-dimensional buffers and "
                         "refcomp.loops.lower is not available to lower it", ir=checked)
    else:
        lowered = checked
    module = emit(lowered, parsed.emit_options(), size_vars=size_vars_of(func))
    path = compile_shared(module.source, parsed, name=func.name)
    try:
        return Library(module, path, func, lowered, parsed)
    except BuildError:
        # A damaged cache entry (a full disk, a killed writer on another file system) would
        # fail the same way forever: drop it and build once more before giving up.
        path.unlink(missing_ok=True)
        path = compile_shared(module.source, parsed, name=func.name)
        return Library(module, path, func, lowered, parsed)


def apply_bounds(func: PrimFunc, bounds: str) -> PrimFunc:
    """func after the bounds policy: proved in bounds ("prove"), guarded ("runtime") or as is ("off")."""
    checked = func
    if bounds == "prove":
        verify = _optional("refcomp.shape", "verify_in_bounds")
        if verify is not None:
            verify(func)
    elif bounds == "runtime":
        guard = _optional("refcomp.shape", "insert_runtime_guards")
        if guard is None:
            raise BuildError("build: bounds='runtime' needs refcomp.shape.insert_runtime_guards, "
                             "which is not available in this installation")
        checked = guard(func)
    return checked
