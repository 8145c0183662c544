"""prefetch: a hint that an element of a buffer will be accessed soon."""
from __future__ import annotations

from ...ast import Block, BufferLoad, Call, Cast, Evaluate, For, IntImm, Max, Min, PrimFunc, const, seq
from ...ast.expr import as_int
from ...errors import ScheduleError
from .index_map import IndexMap
from .lookup import locate_loop
from .tree import replace_in_func

PREFETCH_OP = "prefetch"


def prefetch(func: PrimFunc, loop: For, buffer: str, index_map: IndexMap,
             write: bool = False) -> tuple[PrimFunc, None]:
    """At the start of each iteration of loop, hint that buffer[index_map(loops)] will soon be
    read (or written, when write): the C target issues a software prefetch of that element's cache
    line (`__builtin_prefetch`); the interpreter and the CUDA target ignore it.

    index_map takes the loop vars from the outermost loop around `loop` down to `loop` itself
    and gives one index per dim of the buffer.  Each index is clamped into its dim, so the hint
    never names an element outside the buffer (the next row of the last row is the last row).
    The computation is unchanged.

    Requires: buffer names a parameter of the function or a buffer allocated in a block around
    loop; the map takes as many vars as there are loops down to `loop` and gives one index per
    dim; write is a bool.

    Before: `for i: for c: B[i, c] = f(A[i, c])`;
    `prefetch(c, "A", lambda i, c: (i + 1, c))` after:
    `for i: for c: (prefetch A[min(i + 1, n - 1), c]); B[i, c] = f(A[i, c])`.
    """
    path = locate_loop(func, loop, "prefetch")
    if not isinstance(write, bool):
        raise ScheduleError(f"prefetch: write: expected a bool, got {write!r}", ir=func)
    if not isinstance(index_map, IndexMap):
        raise ScheduleError(f"prefetch: index_map: expected an IndexMap, got {type(index_map).__name__}", ir=func)
    target = _visible_buffer(func, path, buffer)
    loops = [s for s in path if isinstance(s, For)]
    if len(index_map.initial) != len(loops):
        raise ScheduleError(f"prefetch: index_map: takes {len(index_map.initial)} vars, but {len(loops)} loops "
                            f"enclose {loop.loop_var.name} (outermost first, {loop.loop_var.name} last)", ir=func)
    if len(index_map.final) != target.ndim:
        raise ScheduleError(f"prefetch: index_map: gives {len(index_map.final)} indices for {target.name}, which "
                            f"has {target.ndim} dims", ir=func)
    indices = index_map.apply([l.loop_var for l in loops])
    clamped = []
    for index, dim in zip(indices, target.shape):
        if index.dtype != dim.dtype:
            index = Cast(dim.dtype, index)
        last = const(as_int(dim) - 1, dim.dtype) if as_int(dim) is not None else dim - const(1, dim.dtype)
        clamped.append(Min(Max(index, const(0, dim.dtype)), last))
    hint = Evaluate(Call(PREFETCH_OP, (BufferLoad(target, tuple(clamped)), IntImm(int(write), "int32")), "int32"))
    return replace_in_func(func, {id(loop): loop.with_(body=seq(hint, loop.body))}), None


def _visible_buffer(func: PrimFunc, path: list, name: str):
    if not isinstance(name, str):
        raise ScheduleError(f"prefetch: buffer: expected a buffer name, got {name!r}", ir=func)
    found = [b for b in func.buffers if b.name == name]
    for stmt in path:
        if isinstance(stmt, Block):
            found += [b for b in stmt.alloc_buffers if b.name == name]
    if not found:
        raise ScheduleError(f"prefetch: buffer: no parameter or buffer allocated around the loop is named {name!r}",
                            ir=func)
    if len(found) > 1:
        raise ScheduleError(f"prefetch: buffer: {len(found)} buffers visible at the loop are named {name!r}", ir=func)
    return found[0]
