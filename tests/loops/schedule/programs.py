"""Small programs in the te layout (root block, one block per stage) built directly from IR nodes.

Kept independent of refcomp.te so the schedule tests say exactly which IR they start from.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from refcomp.ast import (
    Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For, IterVar, PrimFunc, Range,
    Var, collect, const, seq,
)
from refcomp.ast.stmt import true


def point_regions(loads: Sequence[BufferLoad]) -> tuple[BufferRegion, ...]:
    """One extent-1 region per distinct (buffer, indices) access, in first-seen order."""
    regions = []
    seen = set()
    for load in loads:
        key = (id(load.buffer), tuple(id(i) for i in load.indices))
        if key in seen:
            continue
        seen.add(key)
        regions.append(BufferRegion(load.buffer, tuple(Range(i, 1) for i in load.indices)))
    return tuple(regions)


def stage(name: str, out: Buffer, spatial: Sequence[int], compute: Callable[..., object],
          reduce: Sequence[int] = (), init: float | None = None,
          combine: Callable[[object, object], object] | None = None):
    """A loop nest around one block writing out[spatial iters] = compute(*iters).

    With reduce extents, the block is a reduction: init sets out to `init`, the body does
    out = combine(out, compute(*spatial_iters, *reduce_iters)).
    """
    names = "ijklmn"
    loop_vars = [Var(names[k]) for k in range(len(spatial))] + [Var(f"r{k}") for k in range(len(reduce))]
    extents = list(spatial) + list(reduce)
    iter_vars = [IterVar(Var("v" + lv.name), Range(0, e), "spatial" if k < len(spatial) else "reduce")
                 for k, (lv, e) in enumerate(zip(loop_vars, extents))]
    ivs = [iv.var for iv in iter_vars]
    out_index = tuple(ivs[:len(spatial)])
    value = compute(*ivs)
    init_stmt = None
    if reduce:
        combine = combine or (lambda a, b: a + b)
        value = combine(out.vload(out_index), value)
        init_stmt = BufferStore(out, const(init, out.dtype), out_index)
    body = BufferStore(out, value, out_index)
    loads = collect(value, BufferLoad)
    block = Block(name, tuple(iter_vars), point_regions(loads),
                  (BufferRegion(out, tuple(Range(i, 1) for i in out_index)),), body, init=init_stmt)
    stmt = BlockRealize(tuple(loop_vars), true(), block)
    for lv, extent in reversed(list(zip(loop_vars, extents))):
        stmt = For(lv, 0, extent, "serial", stmt)
    return stmt


def func(params: Sequence[Buffer], stages: Sequence, allocs: Sequence[Buffer] = (), name: str = "main") -> PrimFunc:
    """A PrimFunc with a root block allocating allocs around the stages."""
    root = Block("root", (), (), (), seq(*stages), alloc_buffers=tuple(allocs))
    return PrimFunc(tuple(params), BlockRealize((), true(), root), name)


# ----------------------------------------------------------------------------- the usual programs

def elementwise(n: int = 16, m: int = 8) -> PrimFunc:
    """B = A * 2."""
    A, B = Buffer("A", (n, m)), Buffer("B", (n, m))
    return func([A, B], [stage("B", B, (n, m), lambda i, j: A[i, j] * 2.0)])


def two_elementwise(n: int = 16, m: int = 8) -> PrimFunc:
    """B = A * 2 (intermediate); C = B + 1."""
    A, B, C = Buffer("A", (n, m)), Buffer("B", (n, m)), Buffer("C", (n, m))
    return func([A, C], [stage("B", B, (n, m), lambda i, j: A[i, j] * 2.0),
                         stage("C", C, (n, m), lambda i, j: B[i, j] + 1.0)], allocs=[B])


def matmul(n: int = 16, m: int = 12, k: int = 8, dtype: str = "float32") -> PrimFunc:
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A, B, C = Buffer("A", (n, k), dtype), Buffer("B", (k, m), dtype), Buffer("C", (n, m), dtype)
    return func([A, B, C], [stage("C", C, (n, m), lambda i, j, r: A[i, r] * B[r, j], reduce=(k,), init=0.0)])


def matmul_relu(n: int = 16, m: int = 12, k: int = 8) -> PrimFunc:
    """C = A @ B (intermediate); D = max(C, 0)."""
    from refcomp.ast import max_

    A, B, C, D = Buffer("A", (n, k)), Buffer("B", (k, m)), Buffer("C", (n, m)), Buffer("D", (n, m))
    return func([A, B, D], [
        stage("C", C, (n, m), lambda i, j, r: A[i, r] * B[r, j], reduce=(k,), init=0.0),
        stage("D", D, (n, m), lambda i, j: max_(C[i, j], 0.0)),
    ], allocs=[C])


def row_sum(n: int = 16, m: int = 32) -> PrimFunc:
    """B[i] = sum_j A[i, j]."""
    A, B = Buffer("A", (n, m)), Buffer("B", (n,))
    return func([A, B], [stage("B", B, (n,), lambda i, r: A[i, r], reduce=(m,), init=0.0)])


def conv1d(n: int = 20, k: int = 3) -> PrimFunc:
    """P = A padded copy (intermediate, n + k - 1 long); C[i] = sum_r P[i + r] * W[r]."""
    A, W, P, C = Buffer("A", (n + k - 1,)), Buffer("W", (k,)), Buffer("P", (n + k - 1,)), Buffer("C", (n,))
    return func([A, W, C], [
        stage("P", P, (n + k - 1,), lambda i: A[i] + 0.5),
        stage("C", C, (n,), lambda i, r: P[i + r] * W[r], reduce=(k,), init=0.0),
    ], allocs=[P])


def conv2d(n: int = 6, c: int = 3, f: int = 4, kh: int = 3) -> PrimFunc:
    """O[f, y, x] = sum_{c, dy, dx} I[c, y + dy, x + dx] * W[f, c, dy, dx] (valid padding)."""
    size = n + kh - 1
    I, W, O = Buffer("I", (c, size, size)), Buffer("W", (f, c, kh, kh)), Buffer("O", (f, n, n))
    return func([I, W, O], [stage(
        "O", O, (f, n, n),
        lambda vf, y, x, vc, dy, dx: I[vc, y + dy, x + dx] * W[vf, vc, dy, dx],
        reduce=(c, kh, kh), init=0.0)])


# ----------------------------------------------------------------------------- numpy references

def random_args(fn: PrimFunc, rng: np.random.Generator) -> list[np.ndarray]:
    """Fresh random arrays for every buffer parameter (outputs filled with noise too)."""
    arrays = []
    for buffer in fn.buffers:
        shape = tuple(int(d.value) for d in buffer.shape)
        dtype = buffer.dtype.numpy()
        if np.issubdtype(dtype, np.integer):
            arrays.append(rng.integers(-4, 5, size=shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays
