"""Builders of matmul-tile intrinsics: C[MR, NR] += A[MR, K] * B[K, NR] with B in a given layout.

The description is the loop nest a te matmul becomes once its reduction is decomposed and one
register tile is blockized:

    for i in range(MR), j in range(NR), k in range(K):
        block update(vi: S, vj: S, vk: R):
            C[vi, vj] = C[vi, vj] + cast(A[vi, vk]) * cast(B_layout[vk, vj])

A's strides are free (a_rs, a_cs), or (a_rs, 1) when the kernel reads rows whole; B and C need a
unit stride along j.  K is `k_multiple * K_q` so a kernel that eats k in pairs or quads only
matches tiles whose k extent is a multiple of that.
"""
from __future__ import annotations

from ...ast import (
    Block, BlockRealize, Buffer, BufferRegion, BufferStore, Call, Evaluate, For, IntImm, IterVar,
    PrimFunc, Range, SizeVar, StringImm, Var, const,
)
from ...ast.dtype import dtype as to_dtype

# How B[k, j] is stored: the index tuple in the packed buffer and the packed shape.
B_LAYOUTS = {
    "rows": lambda k, j: (k, j),                       # B[k, j]                (K, NR)
    "pairs": lambda k, j: (k // 2, j, k % 2),          # Bp[k/2, j, k%2]        (K/2, NR, 2)
    "quads": lambda k, j: (k // 4, j, k % 4),          # Bp[k/4, j, k%4]        (K/4, NR, 4)
}
_LAYOUT_GROUP = {"rows": 1, "pairs": 2, "quads": 4}


def _b_buffer(name: str, layout: str, k_groups: Var, nr: int, dtype: str, ldb: Var) -> Buffer:
    group = _LAYOUT_GROUP[layout]
    if layout == "rows":
        return Buffer(name, (k_groups, nr), to_dtype(dtype), strides=(ldb, 1))
    return Buffer(name, (k_groups, nr, group), to_dtype(dtype), strides=(ldb, group, 1))


def matmul_tile(mr: int, nr: int, *, a_dtype: str, b_dtype: str, acc_dtype: str, b_layout: str,
                k_multiple: int, c_function: str, a_col_stride: bool = True,
                partial_rows: bool = False, a_panel: bool = False) -> tuple[PrimFunc, PrimFunc]:
    """The (desc, impl) pair of an MR x NR matmul tile calling `c_function`.

    The C function takes (A, a_rs, [a_cs,] B, ldb, C, ldc, K[, m_rows]) with pointers to element
    [0, 0] of each tile and K the tile's k extent.  With partial_rows the description's block is
    guarded by `i < m_rows`, so it also matches the last, partial tile of an imperfect split of
    the rows (the kernel then touches only min(m_rows, MR) rows); a full tile binds m_rows = MR.
    With a_panel the description reads A from a (K, MR) region, A[vk, vi]: a packed MR-row panel
    Ap[i // MR, k, i % MR], one contiguous run of MR values per k.  The kernel is the same one,
    called with that region's strides (a_rs = 1, a_cs = MR).
    """
    if b_layout not in B_LAYOUTS:
        raise ValueError(f"unknown B layout {b_layout!r}; expected one of {sorted(B_LAYOUTS)}")
    if _LAYOUT_GROUP[b_layout] > 1 and k_multiple % _LAYOUT_GROUP[b_layout]:
        raise ValueError(f"k_multiple {k_multiple} must be a multiple of the {b_layout} group size")
    k_q = SizeVar("K_q")
    k_extent = k_q if k_multiple == 1 else const(k_multiple) * k_q
    a_rs, a_cs, ldb, ldc = Var("a_rs"), Var("a_cs"), Var("ldb"), Var("ldc")
    if a_panel:
        a = Buffer("A", (k_extent, mr), to_dtype(a_dtype), strides=(a_cs, a_rs))
    else:
        a = Buffer("A", (mr, k_extent), to_dtype(a_dtype), strides=(a_rs, a_cs if a_col_stride else 1))
    a_at = (lambda r, kk: (kk, r)) if a_panel else (lambda r, kk: (r, kk))
    group = _LAYOUT_GROUP[b_layout]
    b_rows = k_extent if group == 1 else (k_q if group == k_multiple else const(k_multiple // group) * k_q)
    b = _b_buffer("B", b_layout, b_rows, nr, b_dtype, ldb)
    c = Buffer("C", (mr, nr), to_dtype(acc_dtype), strides=(ldc, 1))

    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    a_value = a[a_at(vi, vk)]
    b_value = b.vload(B_LAYOUTS[b_layout](vk, vj))
    if a.dtype != c.dtype:
        a_value = a_value.astype(c.dtype)
    if b.dtype != c.dtype:
        b_value = b_value.astype(c.dtype)
    update = BufferStore(c, c[vi, vj] + a_value * b_value, (vi, vj))
    block = Block(
        "update",
        (IterVar(vi, Range.from_extent(mr)), IterVar(vj, Range.from_extent(nr)),
         IterVar(vk, Range.from_extent(k_extent), "reduce")),
        reads=(BufferRegion(c, (Range(vi, 1), Range(vj, 1))), BufferRegion(a, tuple(Range(x, 1) for x in a_at(vi, vk))),
               BufferRegion(b, tuple(Range(x, 1) for x in B_LAYOUTS[b_layout](vk, vj)))),
        writes=(BufferRegion(c, (Range(vi, 1), Range(vj, 1))),),
        body=update,
    )
    m_rows = Var("m_rows")
    nest = BlockRealize((i, j, k), i < m_rows if partial_rows else IntImm(1, "bool"), block)
    for var, extent in ((k, k_extent), (j, nr), (i, mr)):
        nest = For(var, 0, extent, "serial", nest)
    params = (a, b, c)
    desc = PrimFunc(params, nest, name=c_function + "_desc")

    zeros = lambda buf: buf.vload((0,) * buf.ndim)  # noqa: E731
    address = lambda buf: Call("address_of", (zeros(buf),), "handle")  # noqa: E731
    args = [StringImm(c_function), address(a), a_rs]
    if a_col_stride:
        args.append(a_cs)
    args += [address(b), ldb, address(c), ldc, k_extent]
    if partial_rows:
        args.append(m_rows)
    impl = PrimFunc(params, Evaluate(Call("call_extern", tuple(args), "int32")), name=c_function)
    return desc, impl
