"""Hand-built tiled matmul programs for the blockize/tensorize tests (no other primitive needed)."""
from __future__ import annotations

from refcomp.ast import (
    Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IntImm, IterVar, PrimFunc, Range, Var,
)
from refcomp.ast.dtype import dtype as to_dtype


def tiled_matmul_update(m, n, k, mr, nr, kc=None, *, a_dtype="float32", b_dtype="float32",
                        acc_dtype="float32", b_layout="rows", k_inner_first=False, name="C"):
    """C[i, j] += A[i, k] * B(k, j) tiled as io, jo, [ko,] ii, jj, ki with B stored per layout.

    b_layout "rows": B[k, j]; "pairs": Bp[k//2, j, k%2]; "quads": Bp[k//4, j, k%4];
    "panels": Bp[j//nr, k, j%nr] (B packed into column panels of width nr).
    """
    kc = kc or k
    a = Buffer("A", (m, k), to_dtype(a_dtype))
    if b_layout == "rows":
        b = Buffer("B", (k, n), to_dtype(b_dtype))
        b_index = lambda vk, vj: (vk, vj)  # noqa: E731
    elif b_layout == "pairs":
        b = Buffer("B", (k // 2, n, 2), to_dtype(b_dtype))
        b_index = lambda vk, vj: (vk // 2, vj, vk % 2)  # noqa: E731
    elif b_layout == "quads":
        b = Buffer("B", (k // 4, n, 4), to_dtype(b_dtype))
        b_index = lambda vk, vj: (vk // 4, vj, vk % 4)  # noqa: E731
    elif b_layout == "panels":
        b = Buffer("B", (n // nr, k, nr), to_dtype(b_dtype))
        b_index = lambda vk, vj: (vj // nr, vk, vj % nr)  # noqa: E731
    else:
        raise ValueError(b_layout)
    c = Buffer("C", (m, n), to_dtype(acc_dtype))
    io, jo, ko, ii, jj, ki = (Var(x) for x in ("io", "jo", "ko", "ii", "jj", "ki"))
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    av, bv = a[vi, vk], b.vload(b_index(vk, vj))
    if av.dtype != c.dtype:
        av = av.astype(c.dtype)
    if bv.dtype != c.dtype:
        bv = bv.astype(c.dtype)
    store = BufferStore(c, c[vi, vj] + av * bv, (vi, vj))
    block = Block(name, (IterVar(vi, Range.from_extent(m)), IterVar(vj, Range.from_extent(n)),
                         IterVar(vk, Range.from_extent(k), "reduce")),
                  reads=(BufferRegion(c, (Range(vi, 1), Range(vj, 1))), BufferRegion(a, (Range(vi, 1), Range(vk, 1))),
                         BufferRegion(b, tuple(Range(x, 1) for x in b_index(vk, vj)))),
                  writes=(BufferRegion(c, (Range(vi, 1), Range(vj, 1))),), body=store)
    k_binding = ko * kc + ki if kc != k else ki
    # rows that mr does not divide: the last row tile is partial, guarded as an imperfect split guards it
    predicate = io * mr + ii < m if m % mr else IntImm(1, "bool")
    realize = BlockRealize((io * mr + ii, jo * nr + jj, k_binding), predicate, block)
    inner = [(ii, mr), (jj, nr), (ki, kc)] if not k_inner_first else [(ki, kc), (ii, mr), (jj, nr)]
    nest = realize
    for var, extent in reversed(inner):
        nest = For(var, 0, extent, "serial", nest)
    outer = [(io, -(-m // mr)), (jo, n // nr)] + ([(ko, k // kc)] if kc != k else [])
    for var, extent in reversed(outer):
        nest = For(var, 0, extent, "serial", nest)
    root = BlockRealize((), IntImm(1, "bool"), Block("root", (), (), (), nest))
    return PrimFunc((a, b, c), root, name="matmul")


def tile_loop(func, name):
    """The For whose loop var is called name."""
    from refcomp.loops.primitives.tree import walk

    return next(s for s in walk(func.body) if isinstance(s, For) and s.loop_var.name == name)
