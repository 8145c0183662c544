"""Loop kinds and annotations: parallel, vectorize, unroll, bind, annotate, unannotate."""
from __future__ import annotations

from typing import Any

from ...ast import Block, For, PrimFunc
from ...ast.node import freeze_mapping
from ...ast.stmt import THREAD_TAGS
from ...errors import ScheduleError
from .cross_thread import carries_reduction, cross_thread_reduction
from .legality import check_no_loop_carried_dependence, const_int
from .lookup import locate_block, locate_loop
from .tree import replace_in_func, walk


def _set_kind(func: PrimFunc, loop: For, kind: str, primitive: str, thread: str | None = None) -> tuple[PrimFunc, None]:
    if loop.kind == "thread_binding" and kind != "thread_binding":
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} is bound to {loop.thread_binding}",
                            ir=func, spot=loop)
    new = loop.with_(kind=kind, thread_binding=thread)
    return replace_in_func(func, {id(loop): new}), None


def parallel(func: PrimFunc, loop: For) -> tuple[PrimFunc, None]:
    """Run the iterations of loop in parallel threads (OpenMP).

    Requires: every block below is complete or a reduction (an update block without init too)
    with affine bindings; the loop binds only spatial iters, each block below depends on it,
    different iterations run different block instances (proved for fused `f // n, f % n`
    bindings), and no block reads what another writes in a different iteration (no
    loop-carried dependence).

    Before: `for i in range(n): B[i] = A[i]`; after: `for i in parallel(n): B[i] = A[i]`.
    """
    locate_loop(func, loop, "parallel")
    check_no_loop_carried_dependence(func, loop, "parallel")
    return _set_kind(func, loop, "parallel", "parallel")


def vectorize(func: PrimFunc, loop: For) -> tuple[PrimFunc, None]:
    """Mark loop for SIMD vectorization.  Same requirements as parallel, and a constant extent.

    Before: `for j in range(16): ...`; after: `for j in vectorized(16): ...`.
    """
    locate_loop(func, loop, "vectorize")
    if const_int(loop.extent) is None:
        raise ScheduleError(f"vectorize: loop {loop.loop_var.name} needs a constant extent", ir=func, spot=loop)
    check_no_loop_carried_dependence(func, loop, "vectorize")
    return _set_kind(func, loop, "vectorized", "vectorize")


def unroll(func: PrimFunc, loop: For) -> tuple[PrimFunc, None]:
    """Mark loop to be unrolled.  Requires nothing (unrolling keeps the order of iterations)."""
    locate_loop(func, loop, "unroll")
    return _set_kind(func, loop, "unrolled", "unroll")


def bind(func: PrimFunc, loop: For, thread_axis: str) -> tuple[PrimFunc, None]:
    """Bind loop to a GPU thread axis ("blockIdx.x", "threadIdx.y", "vthread.x", ...).

    Requires: a known axis; no enclosing or enclosed loop bound to the same axis; the loop starts
    at 0; the same independence as parallel -- except that a loop carrying a reduction may be
    bound to a threadIdx axis when it is a cross-thread reduction (`cross_thread.py`: one block
    `out = out + x` (max, min) with a separable init, the loop in the perfect nest of its reduce
    loops); the CUDA backend combines the threads' partial results in shared memory.

    Before: `for k in range(32): B[i] += A[i, k]`; `bind(k, "threadIdx.x")` after: the same loop
    as `for k in T.thread_binding(32, thread="threadIdx.x")`.
    """
    path = locate_loop(func, loop, "bind")
    if thread_axis not in THREAD_TAGS:
        raise ScheduleError(f"bind: thread_axis: expected one of {', '.join(THREAD_TAGS)}, got {thread_axis!r}",
                            ir=func, spot=loop)
    if const_int(loop.min) != 0:
        raise ScheduleError(f"bind: loop {loop.loop_var.name} must start at 0", ir=func, spot=loop)
    for other in [s for s in path[:-1] if isinstance(s, For)] + [s for s in walk(loop.body) if isinstance(s, For)]:
        if other.thread_binding == thread_axis:
            raise ScheduleError(f"bind: {thread_axis} is already bound to loop {other.loop_var.name}",
                                ir=func, spot=other)
    if thread_axis.startswith("threadIdx"):
        _check_threads_per_block(func, path, loop, thread_axis)
        if carries_reduction(loop):
            cross_thread_reduction(func, loop, "bind")
            return _set_kind(func, loop, "thread_binding", "bind", thread=thread_axis)
    check_no_loop_carried_dependence(func, loop, "bind")
    return _set_kind(func, loop, "thread_binding", "bind", thread=thread_axis)


MAX_THREADS_PER_BLOCK = 1024


def _check_threads_per_block(func: PrimFunc, path, loop: For, thread_axis: str) -> None:
    """Constant threadIdx extents around and below loop multiply to at most 1024 (a GPU block)."""
    extents = {thread_axis: const_int(loop.extent)}
    for other in [s for s in path[:-1] if isinstance(s, For)] + [s for s in walk(loop.body) if isinstance(s, For)]:
        if other.thread_binding and other.thread_binding.startswith("threadIdx"):
            extents[other.thread_binding] = const_int(other.extent)
    known = [e for e in extents.values() if e is not None]
    total = 1
    for e in known:
        total *= e
    if total > MAX_THREADS_PER_BLOCK:
        raise ScheduleError(f"bind: {thread_axis} of extent {const_int(loop.extent)} makes {total} threads per GPU "
                            f"block; at most {MAX_THREADS_PER_BLOCK} are allowed", ir=func, spot=loop)


_ANNOTATION_TYPES = (str, int, float, bool)


def annotate(func: PrimFunc, block_or_loop: Block | For, ann_key: str, ann_val: Any) -> tuple[PrimFunc, None]:
    """Attach annotation ann_key = ann_val (str, int, float or bool) to a block or loop.

    Annotations are hints for later passes; they never change what the program computes.
    """
    if not isinstance(ann_key, str) or not ann_key:
        raise ScheduleError(f"annotate: ann_key: expected a non-empty str, got {ann_key!r}", ir=func)
    if not isinstance(ann_val, _ANNOTATION_TYPES):
        raise ScheduleError(f"annotate: ann_val: expected a str, int, float or bool, got {ann_val!r}", ir=func)
    target = _target(func, block_or_loop, "annotate")
    annotations = dict(target.annotations)
    annotations[ann_key] = ann_val
    return _replace_target(func, target, freeze_mapping(annotations)), None


def unannotate(func: PrimFunc, block_or_loop: Block | For, ann_key: str) -> tuple[PrimFunc, None]:
    """Remove annotation ann_key from a block or loop.  Requires the annotation to be there."""
    target = _target(func, block_or_loop, "unannotate")
    if ann_key not in target.annotations:
        name = target.name if isinstance(target, Block) else target.loop_var.name
        raise ScheduleError(f"unannotate: {name} has no annotation {ann_key!r}", ir=func, spot=target)
    annotations = {k: v for k, v in target.annotations.items() if k != ann_key}
    return _replace_target(func, target, freeze_mapping(annotations)), None


def _target(func: PrimFunc, block_or_loop, primitive: str):
    if isinstance(block_or_loop, Block):
        locate_block(func, block_or_loop, primitive)
    else:
        locate_loop(func, block_or_loop, primitive)
    return block_or_loop


def _replace_target(func: PrimFunc, target, annotations) -> PrimFunc:
    if isinstance(target, Block):
        location = locate_block(func, target, "annotate")
        realize = location.realize
        return replace_in_func(func, {id(realize): realize.with_(block=target.with_(annotations=annotations))})
    return replace_in_func(func, {id(target): target.with_(annotations=annotations)})
