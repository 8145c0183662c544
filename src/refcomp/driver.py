"""refcomp.build: parse the target, apply the bounds policy, lower with the target's hooks, emit,
compile (cached) and load a kernel.

Each target kind (refcomp.target.KINDS) has one `Backend` here: the lowering hooks it adds, its
emitter, its toolchain and its loader.  "interpret" has none of these: the kernel runs in the
reference interpreter.  spec/targets.md is the normative description of targets and bounds modes.

A "c" build keeps what it checked, lowered and emitted in the build cache (spec/c_abi.md,
"Build cache"), under a key computed before any of that work: the function's exact structural
hash (names included), the bounds mode and the settings the checks read, with refcomp's version
and source digest and the emitter's and gcc's settings.  A later build of the same function takes
the entry and skips the proofs, which were done when it was made; an entry that cannot be read
back exactly is removed and the kernel built again.
"""
from __future__ import annotations

import copyreg
import io
import os
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from .ast.function import IRModule, PrimFunc
from .ast.node import freeze_mapping
from .ast.structural import StructuralHasher, UnhashableIR
from .emit_c import CModule, c_options, compile_shared, emit, size_vars_of, toolchain
from .emit_cuda import CUDA_LOWERING, compile_cuda, emit_cuda
from .errors import BuildError
from .loops.lower import LoweringHooks, debug_enabled, lower
from .loops.passes.compact_buffers import compact_local_buffers
from .runtime import CudaLibrary, Library, LoadedKernel
from .runtime.interpreted import InterpretedKernel
from .shape import insert_runtime_guards, verify_in_bounds
from .target import Target, parse_target

BOUNDS_MODES = ("prove", "runtime", "off")
# Z3's Python API is not thread-safe: graph.build compiles kernels from several threads, so the
# proofs of one process run one at a time (lowering, emission and gcc still overlap).
_PROOF_LOCK = threading.Lock()
# Both builds prove every access; what cannot be proved (an index read from a buffer, an edge case
# of a generated kernel) is checked at run time rather than trusted or refused (spec/targets.md).
DEFAULT_BOUNDS = "runtime"


@dataclass(frozen=True)
class Backend:
    """How one target kind builds a kernel: lowering hooks, emitter, toolchain, loader."""

    hooks: LoweringHooks
    emit: Callable[[PrimFunc, Target, list], Any]  # (lowered, target, size vars) -> module
    compile: Callable[[str, Target, str], Path]  # (source, target, name) -> shared object
    load: Callable[..., LoadedKernel]  # (module, path, func, lowered, target) -> kernel


# The C target's one extra lowering step: "local" scratch tiles (a cache stage computed at a loop)
# placed where they are used and shrunk to one iteration's part, stack arrays the C compiler keeps
# in registers (refcomp.loops.passes.compact_buffers).
C_LOWERING = LoweringHooks(after_blocks=(compact_local_buffers,))

BACKENDS: dict[str, Backend] = {
    "c": Backend(C_LOWERING, lambda f, t, sizes: emit(f, c_options(t).emit_options(), size_vars=sizes),
                 compile_shared, Library),
    "cuda": Backend(CUDA_LOWERING, lambda f, t, sizes: emit_cuda(f, sizes), compile_cuda, CudaLibrary),
}


def build(func: PrimFunc | IRModule, target: str | Target = "c", bounds: str = DEFAULT_BOUNDS):
    """Compile a PrimFunc to a callable kernel: `lib(a, b, c)` runs it in place on numpy arrays.

    target is a target string or Target (spec/targets.md): "c" (the default), "c -std=c99",
    "cuda -arch=sm_80", "interpret", ...  bounds="runtime" (the default) proves every buffer
    access in bounds and compiles a check for each one it cannot prove (the kernel then fails
    with a RuntimeFailure instead of touching memory outside a buffer); "prove" refuses such a
    kernel with a ShapeError; "off" trusts the program.  A "c" build of a function built before
    with the same settings takes its checked, lowered and emitted form from the build cache
    (spec/c_abi.md, "Build cache").
    """
    func = _single_prim_func(func)
    parsed = parse_target(target)
    if parsed.kind == "interpret":
        return InterpretedKernel(func, apply_bounds(func, bounds), parsed)
    check_bounds_mode(bounds)
    backend = BACKENDS[parsed.kind]
    # with the lowering's debug output asked for, the passes run (and show their IR) every time
    entry = _CachedBuild.find(func, parsed, bounds) if parsed.kind == "c" and not debug_enabled() else None
    if entry is not None and entry.restored is not None:
        module, lowered = entry.restored
    else:
        checked = apply_bounds(func, bounds)
        lowered = lower(checked, hooks=backend.hooks)
        module = backend.emit(lowered, parsed, size_vars_of(func))
        if entry is not None:
            entry.store(module, lowered)
    path = backend.compile(module.source, parsed, func.name)
    try:
        return backend.load(module, path, func, lowered, parsed)
    except BuildError:
        # A damaged cache entry (a full disk, a killed writer on another file system) would
        # fail the same way forever: drop it and build once more before giving up.
        path.unlink(missing_ok=True)
        path = backend.compile(module.source, parsed, func.name)
        return backend.load(module, path, func, lowered, parsed)


def check_bounds_mode(bounds: str, what: str = "build") -> str:
    """bounds if it is one of BOUNDS_MODES, else a BuildError listing them."""
    if bounds not in BOUNDS_MODES:
        raise BuildError(f"{what}: bounds must be one of {', '.join(map(repr, BOUNDS_MODES))}, got {bounds!r}")
    return bounds


def apply_bounds(func: PrimFunc, bounds: str) -> PrimFunc:
    """func after the bounds policy: proved in bounds ("prove"), guarded ("runtime") or as is ("off")."""
    check_bounds_mode(bounds)
    if bounds == "off":
        return func
    with _PROOF_LOCK:
        if bounds == "prove":
            verify_in_bounds(func)
            return func
        return insert_runtime_guards(func)


class _CachedBuild:
    """The build cache's entry of one "c" build: the emitted module and lowered IR of a function.

    Pickled with the function's own vars and buffers (and the function) left out, as their
    positions in the structural hash's order: restored, the module and lowered IR refer to the
    caller's objects, exactly as a fresh build's do.
    """

    def __init__(self, key: str, objects: list) -> None:
        self.key = key
        self.objects = objects
        self.restored: tuple[CModule, PrimFunc] | None = None

    @classmethod
    def find(cls, func: PrimFunc, target: Target, bounds: str) -> "_CachedBuild | None":
        """The entry for func (restored when the cache holds a good one), or None when func holds a
        value the hash cannot name exactly (it is then built without the cache)."""
        hasher = StructuralHasher(exact=True)
        try:
            hasher.visit(func)
        except UnhashableIR:
            return None
        settings = [hasher.digest(64), f"bounds={bounds}",
                    f"smt_timeout_ms={os.environ.get('REFCOMP_SMT_TIMEOUT_MS', '')}"]
        entry = cls(toolchain.build_key(settings, target), [func, *hasher.objects])
        payload = toolchain.read_build(entry.key)
        if payload is not None:
            entry.restored = entry._restore(payload)
        return entry

    def _restore(self, payload: bytes) -> tuple[CModule, PrimFunc] | None:
        unpickler = pickle.Unpickler(io.BytesIO(payload))
        unpickler.persistent_load = self._object_at
        try:
            count, module, lowered = unpickler.load()
        except Exception:  # any damage the checksum missed: never trusted, built again
            count = None
        if count != len(self.objects) or not isinstance(module, CModule) or not isinstance(lowered, PrimFunc):
            toolchain.reject_build(self.key, "its payload is not a module and a lowered function")
            return None
        return module, lowered

    def _object_at(self, position: int):
        return self.objects[position]

    def store(self, module: CModule, lowered: PrimFunc) -> None:
        positions = {id(obj): i for i, obj in enumerate(self.objects)}
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = lambda obj: positions.get(id(obj))
        pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: _reduce_mapping_proxy}
        try:
            pickler.dump((len(self.objects), module, lowered))
        except (pickle.PicklingError, TypeError, AttributeError):
            return  # an IR value pickle cannot carry: this kernel is simply not cached
        toolchain.write_build(self.key, buffer.getvalue())


def _reduce_mapping_proxy(mapping: MappingProxyType) -> tuple:
    return freeze_mapping, (dict(mapping),)


def _single_prim_func(func: PrimFunc | IRModule) -> PrimFunc:
    if isinstance(func, IRModule):
        prims = [f for _, f in func if isinstance(f, PrimFunc)]
        if len(prims) != 1:
            raise BuildError(f"build: expected a PrimFunc or a module with exactly one PrimFunc, "
                             f"got a module with {len(prims)}")
        func = prims[0]
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build: expected a PrimFunc, got {type(func).__name__}")
    return func
