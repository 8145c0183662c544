"""Attention over a paged KV cache: one loop-IR kernel for prefill and decode, compiled by refcomp.

The kernel reads the cache pages in place through the page table and appends the call's keys and
values to them.  Layouts (P = page size, D = head_dim, G = query heads per key/value head):

    q, out      (B, T, Hq, D)     the call's queries (rotary applied) and the attention output
    k, v        (B, T, Hkv, D)    the call's keys (rotary applied) and values
    k_pages     (N, Hkv, D, P)    float32 or float16 (kv_dtype; computed in float32 either way)
                                  keys stored transposed within a page: a page's P keys of one
                                  head are D contiguous rows of P, so a score loop over keys is a
                                  unit-stride vector loop
                (N, Hkv, D/2, P, 2)  bfloat16: the same in pairs along D, the operand layout of
                                  the bfloat16 dot-product tiles that compute its scores (`dot`)
    v_pages     (N, Hkv, P, D)    values, one contiguous row of D per key
                (N, Hkv, P/2, D, 2)  bfloat16: in pairs along the keys, the operand layout of the
                                  weights x values tiles (dots "amx_pv", "avx512bf16_pv")
    table       (B, M) int32      page table: slot s of sequence b lives in page table[b, s // P]
    start       (B,) int32        positions already in each sequence (the call's first position)

A sequence's position p lives in slot p when p < sinks, else in slot sinks + (p - sinks) % ring
(a full cache has sinks 0 and a ring at least as long as the sequence, so slot = p).  The query at
position pos = start[b] + t attends to every position p <= pos with p < sinks or p > pos - window
(a full cache has window >= every position): StreamingLLM's sinks and recent window.  Positions
before start[b] are read from the pages, the call's own positions from k and v directly, so a
streaming cache whose ring is shorter than the call still sees every key it must.

    for bh in parallel(B * Hkv):                   # one sequence and key/value head per iteration
        for each tile of up to QUERY_TILE consecutive queries t0 .. t0 + tq - 1:
            per query i and head g: running max m, sum l and accumulator acc
            for each chunk of <= P keys the tile's queries see (read from its page once;
                    in a run of more than PREFETCH_PAGES pages the next page is prefetched):
                per register tile of 8 rows (queries x heads): s[row, j] = (q[row] / sqrt(D)) . K[j]
                    (in blocks of 32 and 16 keys; the last count mod 16 keys as one more block;
                    the full blocks keep each row's maximum in 16 lanes while in registers)
                per row, over the keys [lo_i, hi_i) its query i sees in the chunk: m' = max(m, max_j s)
                all rows at once: r = e^(m - m')
                per row: s = e^max(s - m', -80) (0 outside [lo_i, hi_i); inline, softmax_exp);
                    l = l * r + s lane by lane (l: 16 partial sums per row)
                per register tile of 8 rows: acc[row] = acc[row] * r + sum_j s[row, j] V[j]
            out[b, t0 + i, g] = acc[i, g] / (sum of l[i, g]'s 16 lanes)
        then the T new keys and values are stored in their slots

dot "amx_pv" (bfloat16 pages): both products on AMX tiles, the weights rounded to bfloat16; where
the cache allows, the call's keys and values are stored first and every key is read through the
pages, so that a query's chunks are its pages whatever call it is in (attention_func).  Dot
"avx512bf16_pv" is the same kernel on the AVX512_BF16 tile (vdpbf16ps, 8 rows a call) for both
products, the default for bfloat16 pages on a CPU with AVX512_BF16 and no AMX.

A decode step is one tile of one query; a verify step of a few tokens is one tile, so it reads
the pages once, as a decode step does, and only its arithmetic grows with the number of queries.
Every (b, kv head) iteration reads and writes only its own sequence's pages, so the in-place
append needs no synchronisation.  The kernel is built once per (G, D, P, Hkv) and cached.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from ..ast import (
    Allocate, Buffer, BufferStore, Call, Cast, Evaluate, FloatImm, For, IfThenElse, IntImm, Let, LetStmt, PrimFunc, SizeVar, Stmt,
    StringImm, Var, max_, min_, select, seq,
)
from ..ast.exp_poly import exp_expr
from ..driver import build
from ..errors import ArgumentError
from ..loops import intrin
from ..loops.intrin.kernels_amx import BF16_SCORES_AMX_32X32, BF16_VALUES_AMX
from ..loops.intrin.kernels_bf16 import BF16_VALUES_AVX512BF16

# A running maximum that starts below every score yet keeps e^(m - m') finite arithmetic.
_LOWEST = -3.0e38
_INT = "int64"
_ZERO = IntImm(0, _INT)
LANES = 16
EXP_FLOOR = -80.0
EXP_DEGREE = 7  # of softmax_exp's polynomial (refcomp.ast.exp_poly: the Taylor one)
# queries per tile: each block of keys and values is read once for a tile's queries
QUERY_TILE = 8
# runs of more pages than this prefetch their pages ahead (attention_func's cached_run)
PREFETCH_PAGES = 4


def _v(name: str) -> Var:
    return Var(name, _INT)


def _i64(value: Any) -> Any:
    return Cast(_INT, value) if getattr(value, "dtype", None) is not None and str(value.dtype) != _INT else value


def _const(value: int) -> IntImm:
    return IntImm(value, _INT)


def _f(value: float) -> FloatImm:
    return FloatImm(value, "float32")


def _for(var: Var, lo: Any, extent: Any, body: Stmt, kind: str = "serial") -> For:
    lo = _const(lo) if isinstance(lo, int) else lo
    return For(var, lo, max_(extent, _const(0)) if not isinstance(extent, IntImm) else extent, kind, body)


def _let(var: Var, value: Any, body: Stmt) -> LetStmt:
    return LetStmt(var, value, body)


def softmax_exp(x: Any) -> Any:
    """e^max(x, EXP_FLOOR) for x = a score minus the running maximum (<= 0), computed inline.

    A weight below e^-80 relative to the row's largest is raised to e^-80 (1.8e-35): at most
    P * 1.8e-35 of the row's sum, far below float32 rounding, and it keeps 2^n a normal number
    (n >= -116).  The exponential is refcomp.ast.exp_poly's, its Taylor polynomial of degree 7
    (within 2 units in the last place of float32 on [-80, 0]), the same float operations in every lane, in vector and scalar
    code alike: no library call, so a decode step (one query) and a verify step (several) compute
    each weight with the same instructions."""
    xv = Var("ex", "float32")
    return Let(xv, _fmax(_f(EXP_FLOOR), x), exp_expr(xv, EXP_DEGREE))


def _fmax(a: Any, b: Any) -> Any:
    """The larger of two floats as x86's max instruction takes it, `b < a ? a : b`: one instruction
    (`max_` keeps IEEE's NaN rule and costs a compare and a blend more per vector, a compare and a
    branch per scalar).  With a NaN operand the result is `b`: a NaN score (the `b` of the running
    maximum) makes the maximum NaN, and the output NaN, as a NaN score does in exact arithmetic."""
    return select(b < a, a, b)


def _assume(condition: Any) -> Evaluate:
    return Evaluate(Call("assume", (condition,), "bool"))


KV_DTYPES = ("float32", "float16", "bfloat16")
# how a bfloat16 kernel computes its scores: "amx", the registered AMX tile (AMX_TILE: 32 rows x
# 32 keys per call, tdpbf16ps); "avx512bf16", the AVX512_BF16 tile (BF16_TILE: vdpbf16ps, two
# products per lane, 8 rows x 32 keys per call); "fp32", float32 loops on the same numbers;
# "amx_pv": the scores and the weights x values products on AMX tiles, the softmax weights rounded
# to bfloat16, every query's chunks aligned to the pages (attention_func); "avx512bf16_pv": the
# same design on the AVX512_BF16 tile (scores and weights x values, 8 rows per call)
DOTS = ("fp32", "avx512bf16", "amx", "amx_pv", "avx512bf16_pv")
PV_DOTS = ("amx_pv", "avx512bf16_pv")  # both products on a tile, bfloat16 weights, aligned chunks
BF16_TILE = "x86.avx512bf16.bf16gemm_8x32"
AMX_TILE = "x86.amx.bf16gemm_32x32"
BF16_BLOCK = 32  # keys per score block of either tile (their NR)
TILE_ROWS = {"avx512bf16": 8, "amx": 32, "amx_pv": 32, "avx512bf16_pv": 8}   # state rows per call (their MR)
# amx: the AMX tile's features, and its C function that starts from zero (loops.intrin.kernels_amx)
AMX_SCORES = "refcomp_bf16scores_amx_32x32"
# amx_pv: weights (float32 rows, rounded to bfloat16 as packed) x values, and the scores, both
# without the tile configuration, which the kernel loads once per sequence and key/value head
AMX_VALUES = "refcomp_bf16values_amx"
# avx512bf16_pv: the same weights x values product on BF16_TILE (loops.intrin.kernels_bf16)
BF16_VALUES = "refcomp_bf16values_avx512bf16"
AMX_PV_SCORES = "refcomp_bf16scores_amx_32x32_configured"


def _pv_dot(head_dim: int, page_size: int) -> str | None:
    """The dot with both products on a tile that applies on this CPU, if one does: the tiles'
    32-long steps divide head_dim and the pages, and the CPU has AMX-BF16 ("amx_pv") or
    AVX512_BF16 ("avx512bf16_pv")."""
    if head_dim % 32 or page_size % BF16_BLOCK:
        return None
    if intrin.get(AMX_TILE).available():
        return "amx_pv"
    return "avx512bf16_pv" if intrin.get(BF16_TILE).available() else None


def default_dot(kv_dtype: str, head_dim: int, page_size: int) -> str:
    """The arithmetic a kernel with these pages gets on the CPU running refcomp: for bfloat16
    pages, both products on a tile where one applies ("amx_pv" with AMX, else "avx512bf16_pv"
    with AVX512_BF16: `_pv_dot`), else for pages of whole blocks of BF16_BLOCK keys the
    AVX512_BF16 score tile when the CPU has it; float32 loops otherwise.  (dot="amx", AMX for the
    scores alone, measured no faster than float16 pages: spec/llm.md.)"""
    if kv_dtype != "bfloat16" or page_size % BF16_BLOCK or head_dim % 2:
        return "fp32"
    pv = _pv_dot(head_dim, page_size)
    if pv is not None:
        return pv
    return "avx512bf16" if intrin.get(BF16_TILE).available() else "fp32"


def speculative_kv_dtype(head_dim: int, page_size: int) -> str:
    """The KV pages on which MagicDec decodes fastest against its own autoregressive decoding on
    this CPU: bfloat16 where amx_pv applies (the verify's products on AMX tiles: spec/llm.md, the
    bfloat16 paragraph), else float16.  With AVX512_BF16 alone (avx512bf16_pv) bfloat16 pages make
    both a decode step and a verify about 8% faster at two threads, but not the verify relative to
    the decode step, so the speedup is no larger and float16 keeps its accuracy.  Not the model's
    default: bfloat16 pages round keys and values to 8 significant bits (logits about 0.05 from
    float32's on the shipped model, against 0.01 with float16)."""
    return "bfloat16" if _pv_dot(head_dim, page_size) == "amx_pv" else "float16"


def attention_func(group: int, head_dim: int, page_size: int, kv_heads: int, kv_dtype: str = "float32",
                   dot: str | None = None) -> PrimFunc:
    """The paged attention kernel for G = group query heads per kv head (see the module docstring).

    kv_dtype is the pages' element type: float32, float16 or bfloat16 (half the bytes; the kernel
    converts to float32 as it loads).  With 16-bit pages the call's own keys and values are
    rounded to that type before use too, so a token sees the same numbers whether its neighbours
    come from this call or from the pages (a verify pass equals the decode steps).

    With bfloat16 pages a page's keys are stored in pairs along D, (N, Hkv, D/2, P, 2), the
    layout of vdpbf16ps's second operand, and each query (scaled by 1/sqrt(D)) is rounded to
    bfloat16 too: a score is a sum of exact products of bfloat16 numbers, accumulated in float32
    (`dot`: on the AVX512_BF16 tile, two products per lane and instruction, on AMX, or in float32
    loops; default `default_dot`).  Values, weights and the softmax stay float32, except with the
    pv dots ("amx_pv", "avx512bf16_pv"), which multiply the weights, rounded to bfloat16, with the
    value pages on the same tile as the scores and align every query's chunks to the pages (a
    verify equals the decode steps of its positions bit for bit)."""
    if kv_dtype not in KV_DTYPES:
        raise ArgumentError(f"paged attention: kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
    G, D, P, H = group, head_dim, page_size, kv_heads
    narrow = kv_dtype != "float32"
    bf16 = kv_dtype == "bfloat16"
    dot = default_dot(kv_dtype, D, P) if dot is None else dot
    if dot not in DOTS or (dot != "fp32" and not bf16):
        raise ArgumentError(f"paged attention: dot must be one of {DOTS} (the tiles with bfloat16 pages), "
                            f"got {dot!r} with {kv_dtype} pages")
    if bf16 and D % 2:
        raise ArgumentError(f"paged attention: bfloat16 pages store keys in pairs along head_dim, which must be "
                            f"even, got {D}")
    if bf16 and P % 2:
        raise ArgumentError(f"paged attention: bfloat16 pages store values in pairs along the keys, so the page "
                            f"size must be even, got {P}")
    if dot != "fp32" and P % BF16_BLOCK:
        raise ArgumentError(f"paged attention: the {dot} scores need pages of a multiple of {BF16_BLOCK} "
                            f"keys, got {P}")
    if (dot == "amx" or dot in PV_DOTS) and D % 32:
        raise ArgumentError(f"paged attention: the {dot} products need head_dim a multiple of 32, got {D}")
    tiled = dot != "fp32"
    amx = dot in ("amx", "amx_pv")
    pv = dot in PV_DOTS  # the weights x values products on the tile too, weights in bfloat16, aligned chunks

    def load(value: Any) -> Any:
        """A page element as float32."""
        return Cast("float32", value) if narrow else value

    def stored(value: Any) -> Any:
        """A float32 of this call as the pages hold it."""
        return Cast("float32", Cast(kv_dtype, value)) if narrow else value
    B, T, N, M = (SizeVar(n, _INT) for n in ("B", "T", "N", "M"))
    q = Buffer("q", (B, T, _const(H * G), _const(D)), "float32")
    k = Buffer("k", (B, T, _const(H), _const(D)), "float32")
    v = Buffer("v", (B, T, _const(H), _const(D)), "float32")
    if bf16:
        kp = Buffer("k_pages", (N, _const(H), _const(D // 2), _const(P), _const(2)), kv_dtype)
    else:
        kp = Buffer("k_pages", (N, _const(H), _const(D), _const(P)), kv_dtype)

    def key_at(page: Any, dd: Any, slot: Any) -> Any:
        """Element dd of the key in `slot` of `page` (head kh), as stored."""
        return kp[page, kh, dd // 2, slot, dd % 2] if bf16 else kp[page, kh, dd, slot]
    if bf16:  # values in pairs along the keys: the second operand of tdpbf16ps for weights x values
        vp = Buffer("v_pages", (N, _const(H), _const(P // 2), _const(D), _const(2)), kv_dtype)
    else:
        vp = Buffer("v_pages", (N, _const(H), _const(P), _const(D)), kv_dtype)

    def value_at(page: Any, slot: Any, dd: Any) -> Any:
        """Element dd of the value in `slot` of `page` (head kh), as stored."""
        return vp[page, kh, slot // 2, dd, slot % 2] if bf16 else vp[page, kh, slot, dd]
    table = Buffer("table", (B, M), "int32")
    start = Buffer("start", (B,), "int32")
    out = Buffer("out", (B, T, _const(H * G), _const(D)), "float32")
    sinks, ring, window = _v("sinks"), _v("ring"), _v("window")

    QT = QUERY_TILE
    R = QT * G  # state rows: query i of the tile and head g at row i * G + g
    # rows of the score and query buffers: whole calls of the tile (amx: 32 rows a call)
    RS = -(-R // TILE_ROWS["amx"]) * TILE_ROWS["amx"] if amx else R
    qs = Buffer("qs", (_const(R * D),), "float32")
    acc = Buffer("acc", (_const(R * D),), "float32")
    s = Buffer("s", (_const(RS * P),), "float32")
    m = Buffer("m", (_const(R),), "float32")
    l = Buffer("l", (_const(R * LANES),), "float32")  # per row, the running sum in LANES partial sums
    mx = Buffer("mx", (_const(R),), "float32")  # per row, the running maximum after the chunk
    top = Buffer("top", (_const(R * LANES),), "float32")  # per row, L lanes of the chunk's maximum score
    rescale = Buffer("rescale", (_const(R),), "float32")  # per row, e^(m - m') of the chunk
    kt = Buffer("kt", (_const(D), T), "float32")  # the call's keys of this head, transposed
    # tiled: the queries as bfloat16 (the tile's A) and the call's keys in pairs like a page's,
    # with BF16_BLOCK zero keys after the last (a score block of the tile reads whole blocks)
    qbf = Buffer("qbf", (_const(RS * D),), "bfloat16")
    ktp = Buffer("ktp", (_const(D // 2), T + BF16_BLOCK, _const(2)), "bfloat16")
    ktail2 = Buffer("ktail2", (_const(D * BF16_BLOCK),), "bfloat16")
    tile_intrin = intrin.get(AMX_TILE if amx else BF16_TILE) if tiled else None
    # amx_pv: the weights of a chunk as bfloat16 (the value tile's A; a chunk starting at key a of
    # its page or call sits at column a % BF16_BLOCK, zeros around it), the tile's products, and the
    # call's values in pairs along the keys like a page's, with zero keys after the last
    PW = P + BF16_BLOCK
    wbf = Buffer("wbf", (_const(RS * PW),), "bfloat16")
    pvb = Buffer("pvb", (_const(RS * D),), "float32")
    vtp = Buffer("vtp", ((T + 1) // 2 + BF16_BLOCK // 2, _const(D), _const(2)), "bfloat16")

    bh, b, kh, tg, t0, tq, st = _v("bh"), _v("b"), _v("kh"), _v("tg"), _v("t0"), _v("tq"), _v("st")
    t, i, g, d, r = _v("t"), _v("i"), _v("g"), _v("d"), _v("r")
    scale = 1.0 / math.sqrt(D)

    # lanes of the score and value blocks: 16 floats (two AVX2 registers, one AVX-512 register)
    L = LANES
    DW = 2 * L if D % (2 * L) == 0 else L if D % L == 0 else D   # value columns per step
    KB = 2 * L if P % (2 * L) == 0 else L   # keys per score block
    # queries per register tile: U * G state rows (8 for the usual G), so a tile holds 8 x KB scores
    # or 8 x DW accumulators (16 AVX-512 registers) and each key or value row is loaded once per tile
    U = max(1, 8 // G)

    def query_stores(value: Any, at: Any) -> tuple[Stmt, ...]:
        """A scaled query element into qs (float32; bfloat16 pages: rounded to bfloat16) and,
        tiled, into qbf."""
        if not bf16:
            return (BufferStore(qs, value, (at,)),)
        return (BufferStore(qs, stored(value), (at,)),) + ((BufferStore(qbf, Cast(kv_dtype, value), (at,)),)
                                                             if tiled else ())

    def window_lo(query: Any) -> Any:
        """The first non-sink position the tile's query `query` sees."""
        return max_(sinks, st + t0 + query + 1 - window)

    def address(element: Any) -> Call:
        return Call("address_of", (element,), "handle")

    def score_tiles(count: Any, room: Any, kraw: Callable[[Any, Any, Any], Any], kld: Any) -> Stmt:
        """s[row, j] of the tile's rows and the chunk's `count` keys by BF16_TILE, per block of
        BF16_BLOCK keys (zeroed first: the tile adds to its C) and BF16_ROWS rows.  A block read
        in place runs along the key rows up to BF16_BLOCK keys past its first; where that passes
        `room` (the page's end) the block is first copied to ktail2, the keys past the chunk
        repeating its last.  The scores past the chunk land in s's row where nothing reads them."""
        kb, mr = BF16_BLOCK, TILE_ROWS[dot]
        jb, r6, l6, dp, e6, rb = (_v(n) for n in ("jb", "r6", "l6", "dp", "e6", "rb"))
        rows = tq * G
        first = jb * kb

        def call(b_first: Any, ldb: Any) -> Stmt:
            if amx:  # C from zero; the rows past the tile's in their 16-row tile are computed, not read
                args = (address(qbf[rb * (mr * D)]), _const(D), address(b_first), ldb,
                        address(s[rb * (mr * P) + first]), _const(P), _const(D), min_(_const(mr), rows - rb * mr))
            else:
                args = (address(qbf[rb * (mr * D)]), _const(D), _const(1), address(b_first), ldb,
                        address(s[rb * (mr * P) + first]), _const(P), _const(D), min_(_const(mr), rows - rb * mr))
            name = (AMX_PV_SCORES if pv else AMX_SCORES) if amx else tile_intrin.impl.name
            return _for(rb, 0, (rows + (mr - 1)) // mr, Evaluate(Call(
                "call_extern", (StringImm(name),) + args, "int32")))

        zero = _for(r6, 0, rows, _for(l6, 0, _const(kb), BufferStore(s, _f(0.0), (r6 * P + first + l6,)),
                                      "vectorized"))
        copy = _for(dp, 0, _const(D // 2), _for(l6, 0, _const(kb), _for(e6, 0, _const(2), BufferStore(
            ktail2, kraw(dp, min_(first + l6, count - 1), e6), ((dp * kb + l6) * 2 + e6,)))))
        block = seq(*(() if amx else (zero,)), IfThenElse(first + kb <= room, call(kraw(_ZERO, first, _ZERO), kld),
                                     seq(copy, call(ktail2[_ZERO], _const(2 * kb)))))
        return Allocate(ktail2, _for(jb, 0, (count + (kb - 1)) // kb, block))

    def value_tiles(count: Any, vblock: tuple[Callable[[Any, Any, Any], Any], Any]) -> Stmt:
        """amx_pv: acc[row] = acc[row] * rescale[row] + sum_j s[row, j] V[j] with the products on
        the AMX tile (AMX_VALUES): the float32 weights in s go, rounded to bfloat16, to wbf at
        column off = a % 32 of their row (zeros before, and after up to the tile's K, a
        multiple of 32), the values are read in place in pairs from key a - off, and the tile's
        C (from zero) is added to the rescaled accumulators.  A row's sums depend only on its own
        weights: the same numbers in a decode step and in a verify of the same positions."""
        vraw, a = vblock
        kb, mr = BF16_BLOCK, TILE_ROWS[dot]
        off = a % kb
        K = (off + count + (kb - 1)) // kb * kb
        rows = tq * G
        r8, rb, d9 = (_v(n) for n in ("r8", "rb8", "d9"))
        calls = _for(rb, 0, (rows + (mr - 1)) // mr, Evaluate(Call("call_extern", (
            StringImm(AMX_VALUES if amx else BF16_VALUES), address(s[rb * (mr * P)]), _const(P), count, off, address(wbf[rb * (mr * PW)]),
            _const(PW), address(vraw((a - off) // 2, _ZERO, _ZERO)), _const(2 * D), address(pvb[rb * (mr * D)]),
            _const(D), _const(D), K, min_(_const(mr), rows - rb * mr)), "int32")))
        update = _for(r8, 0, rows, _for(d9, 0, _const(D), BufferStore(
            acc, acc[r8 * D + d9] * rescale[r8] + pvb[r8 * D + d9], (r8 * D + d9,)), "vectorized"))
        return seq(calls, update)

    def chunk(count: Any, pos0: Any, windowed: bool, kload: Callable[[Any, Any], Any],
              vload: Callable[[Any, Any], Any], room: Any, kraw: Callable[[Any, Any, Any], Any] | None = None,
              kld: Any = None, spread: tuple[Any, Callable[[Any], Stmt], Callable[[Any], Stmt]] | None = None,
              vblock: tuple[Callable[[Any, Any, Any], Any], Any] | None = None, skip: Any = _ZERO) -> Stmt:
        """Fold `count` (<= P) keys at positions pos0, pos0 + 1, ... into the running softmax of
        every query of the tile and head of the group.

        The keys and values are read from their pages once per chunk and used for all the tile's
        queries (the chunk stays in the first-level cache).  Query i sees the keys from
        max(lo_pos, pos0) to min(pos_i, pos0 + count - 1), lo_pos = its window's start when
        `windowed` (positions past the sinks) else 0; the other scores weigh zero.
        Scores: per block of KB = 2L (or L) keys, a tile of U queries' G heads' KB scores stays in
        registers over the D products; values: per 2L (or L) columns of D, the tile's accumulators stay
        in registers over the keys (a last tq % U queries in tiles of one query).
        Tiled (bfloat16 pages on AVX512_BF16): the scores are BF16_TILE calls instead, per block of
        BF16_BLOCK keys and BF16_ROWS state rows; `kraw(dp, j, e)` is element 2 dp + e of key j as
        stored, in rows of pairs `kld` elements apart.
        `spread` = (condition, body, line), given: where the condition holds, body(j) is run once
        per key j of the chunk in the first value tile's key loop (the next page's prefetches,
        spread over the chunk's arithmetic); the pv dots run line(c) for each line c of the next
        page instead, a few per block of weights (weights); the condition is tested once per
        chunk, the loop chosen by it.
        amx_pv: `vblock` = (vraw, a): vraw(p, d, e) is element d of key 2 p + e of the chunk's page
        (or of the call's values) in pairs along the keys, the chunk's first key being key a there;
        the weights are rounded to bfloat16 and multiplied with the values on the AMX tile.
        `skip`: the chunk's first `skip` keys are read (their scores computed) but seen by no query
        (a chunk started early, at a whole block of its page: cached_run)."""
        jc, d1, r1, ln, jt, d4, g4, i1, u1 = (_v(n) for n in ("jc", "d1", "r1", "ln", "jt", "d4", "g4", "i1", "u1"))
        full = count // KB
        # when KB = 2L: one more block of L keys after the full ones, if it fits
        half_blocks = (count - full * KB) // L if KB == 2 * L else _ZERO
        done = full * KB + half_blocks * L   # keys scored by register tiles; the rest one by one

        def score_rows(r0: Any, rows: int, kb: int, first: Any, blocks: Any,
                       keys: Callable[[Any, Any], Any] = kload, track: bool = False) -> Stmt:
            """Scores of the `rows` state rows from r0 (whole queries) on `blocks` blocks of kb keys
            from key `first`: a register tile of rows x kb scores, each key row of the block loaded
            once per tile (`keys(d, j)`: element d of key j).  `track`: each row's L lanes of
            `top` take the maximum of its scores while they are still in registers."""
            sreg = Buffer("sreg", (_const(rows * kb),), "float32")
            lane = r1 * kb + ln
            key = first + jc * kb + ln
            hb = _v("hb")
            keep_top = _for(r1, 0, _const(rows), _for(hb, 0, _const(kb // L), _for(ln, 0, _const(L), BufferStore(
                top, _fmax(top[(r0 + r1) * L + ln], sreg[r1 * kb + hb * L + ln]), ((r0 + r1) * L + ln,)),
                "vectorized"), "unrolled"), "unrolled")
            return _for(jc, 0, blocks, Allocate(sreg, seq(
                _for(r1, 0, _const(rows), _for(ln, 0, _const(kb), BufferStore(sreg, _f(0.0), (lane,)), "vectorized"),
                     "unrolled"),
                _for(d1, 0, _const(D), _for(r1, 0, _const(rows), _for(ln, 0, _const(kb), BufferStore(
                    sreg, sreg[lane] + qs[(r0 + r1) * D + d1] * keys(d1, key), (lane,)), "vectorized"), "unrolled"),
                     "unrolled"),
                *([keep_top] if track else []),
                _for(r1, 0, _const(rows), _for(ln, 0, _const(kb), BufferStore(s, sreg[lane], ((r0 + r1) * P + key,)),
                                               "vectorized"), "unrolled"))))

        # the last count - done (< L) keys: copied into ktail (D x L), the lanes past the chunk
        # holding the keys after it or zeros, and scored as one more block of L lanes (P a multiple of L:
        # the block's scores stay inside s's row; the lanes past the chunk land where nothing
        # reads them); otherwise one key at a time
        tail_block = P % L == 0
        ktail = Buffer("ktail", (_const(D * L),), "float32")
        d5, l5 = _v("d5"), _v("l5")
        # `room`: keys kload may read from key 0 (the rest of the page, or of the call's keys):
        # where the L lanes fit, a plain vector copy (the lanes past the chunk read keys outside it);
        # otherwise zeros, then the chunk's keys over them (a decode step's own key is 1 of the 16)
        tail_copy = IfThenElse(
            done + L <= room,
            _for(d5, 0, _const(D), _for(l5, 0, _const(L), BufferStore(ktail, kload(d5, done + l5), (d5 * L + l5,)),
                                        "vectorized")),
            seq(_for(d5, 0, _const(D * L), BufferStore(ktail, _f(0.0), (d5,)), "vectorized"),
                _for(d5, 0, _const(D), _for(l5, 0, count - done, BufferStore(
                    ktail, kload(d5, done + l5), (d5 * L + l5,))))))

        def score_all(r0: Any, rows: int) -> Stmt:
            parts = [score_rows(r0, rows, KB, _ZERO, full, track=track_top)]
            if KB == 2 * L:
                parts.append(score_rows(r0, rows, L, full * KB, half_blocks))
            if tail_block:
                parts.append(score_rows(r0, rows, L, done, (count - done + (L - 1)) // L,
                                        lambda dd, jj: ktail[dd * L + jj - done]))
            return seq(*parts)

        row4 = i1 * G + g4
        # the full blocks' score tiles keep each row's maximum in `top` (used by whole chunks,
        # which are all full blocks: P a multiple of KB); it starts at the lowest float
        track_top = not tiled and P % KB == 0
        l9 = _v("l9")
        scores = score_tiles(count, room, kraw, kld) if tiled else seq(
            *([_for(l9, 0, tq * (G * L), BufferStore(top, _f(_LOWEST), (l9,)), "vectorized")] if track_top else []),
            *([IfThenElse(count > done, tail_copy)] if tail_block else []),
            _for(u1, 0, tq // U, score_all(u1 * (U * G), U * G)),
            _for(i1, tq // U * U, tq - tq // U * U, score_all(i1 * G, G)),
            *([] if tail_block else [_for(i1, 0, tq, _for(jt, done, count - done, _for(g4, 0, _const(G), seq(
                BufferStore(s, _f(0.0), (row4 * P + jt,)),
                _for(d4, 0, _const(D), BufferStore(s, s[row4 * P + jt] + qs[row4 * D + d4] * kload(d4, jt),
                                                   (row4 * P + jt,)))))))]))
        # per query, the visible keys [lo, hi) of the chunk; running max and sum of their scores
        # in L lanes, folded after (short scalar chains); the other keys' weights are zero
        lanes = Buffer("lanes", (_const(L),), "float32")
        l3, l4, j6, j7, j8, lo, hi, nf, row = (_v(n) for n in ("l3", "l4", "j6", "j7", "j8", "lo", "hi", "nf", "row"))
        g2, j3, d2, i2 = (_v(n) for n in ("g2", "j3", "d2", "i2"))
        score = lambda jj: s[row * P + jj]  # noqa: E731

        halves = Buffer("halves", (_const(L // 2),), "float32")

        def fold(combine: Callable[[Any, Any], Any]) -> Stmt:
            """lanes[0] = combine of the L lanes, by halving (a tree, not a serial chain).  Each step
            reads one buffer and writes the other (lanes, halves, lanes, ...), so that it is one
            vector operation (a step reading and writing one buffer is a serial loop)."""
            steps, half, source = [], L // 2, lanes
            while half >= 1:
                target = halves if source is lanes else lanes
                steps.append(_for(l4, 0, _const(half), BufferStore(
                    target, combine(source[l4], source[l4 + half]), (l4,)), "vectorized"))
                half //= 2
                source = target
            if source is not lanes:
                steps.append(BufferStore(lanes, source[_ZERO], (_ZERO,)))
            return Allocate(halves, seq(*steps))

        lo_pos = window_lo(i2) if windowed else _ZERO

        def visible(body: Stmt, whole: bool) -> Stmt:
            """body for each state row of the tile, with [lo, hi) its query's visible keys of the
            chunk; `whole`: every query sees the whole chunk of P keys (constant bounds)."""
            if whole:
                return _for(i2, 0, tq, _let(lo, _ZERO, _let(hi, _const(P), _let(nf, _const(P // L), _for(
                    g2, 0, _const(G), _let(row, i2 * G + g2, body))))))
            return _for(i2, 0, tq, _let(lo, min_(max_(lo_pos - pos0, skip), count), _let(
                hi, min_(max_(st + t0 + i2 + 1 - pos0, lo), count), _let(nf, (hi - lo) // L, _for(
                    g2, 0, _const(G), _let(row, i2 * G + g2, body))))))

        def new_max(whole: bool) -> Stmt:
            """1. per row, the new running maximum mx = max(m, visible scores); a whole chunk's
            scores were all in full blocks, whose maxima `top` holds"""
            if whole and track_top:
                return visible(Allocate(lanes, seq(
                    _for(l3, 0, _const(L), BufferStore(lanes, top[row * L + l3], (l3,)), "vectorized"),
                    BufferStore(mx, m[row], (row,)),
                    fold(_fmax), BufferStore(mx, _fmax(mx[row], lanes[_ZERO]), (row,)))), whole)
            return visible(Allocate(lanes, seq(
                _for(l3, 0, _const(L), BufferStore(lanes, m[row], (l3,)), "vectorized"),
                _for(j6, 0, nf, _for(l3, 0, _const(L), BufferStore(
                    lanes, _fmax(lanes[l3], score(lo + j6 * L + l3)), (l3,)), "vectorized")),
                BufferStore(mx, m[row], (row,)),
                fold(_fmax), BufferStore(mx, _fmax(mx[row], lanes[_ZERO]), (row,)),
                *([] if whole else [_for(j3, lo + nf * L, hi - lo - nf * L,
                                         BufferStore(mx, _fmax(mx[row], score(j3)), (row,)))]))), whole)

        # 2. every row of the tile at once (vector exp): rescale = e^(m - mx); m = mx
        # (rows past the tile's queries keep m = mx = lowest: rescale 1)
        r2 = _v("r2")
        shift = _for(r2, 0, _const(R), seq(
            BufferStore(rescale, softmax_exp(m[r2] - mx[r2]), (r2,)),
            BufferStore(m, mx[r2], (r2,))), "vectorized")

        def weights(whole: bool) -> Stmt:
            """3. per row, the visible scores become e^(s - m), the others 0; the row's L partial sums
            l are rescaled and add them lane by lane (folded once, after the tile's last chunk)"""
            weight = softmax_exp(score(lo + j7 * L + l3) - m[row])
            jp, nrows, cl = _v("jp"), tq * G, _v("cl")
            exps = _for(l3, 0, _const(L), seq(
                BufferStore(s, weight, (row * P + lo + j7 * L + l3,)),
                BufferStore(lanes, lanes[l3] + score(lo + j7 * L + l3), (l3,))), "vectorized")
            exp_loop = _for(j7, 0, nf, exps)
            spread_rows = []
            if pv and spread is not None:
                # the pv dots (their value products are calls: no key loop to spread over): the
                # next page's prefetches spread over the rows, row r issuing those of keys
                # [r count / rows, (r + 1) count / rows) of the chunk (prefetch_spread) before its
                # weights; where that is more than 2 lines (of keys, and as many of values) per
                # block of L weights, as in a decode step (few rows), a whole chunk issues them
                # between its rows' blocks instead, block `slot` of the rows * P / L issuing
                # lines [slot * per, slot * per + per) (spread[2](c): line c of the next page's
                # keys and values).  Measured at B = 32, S = 4K: a decode step's bursts (64 lines
                # a row) fill the core's outstanding-miss slots and stall it (between blocks:
                # 0.92x the attention time); a few lines a row are cheaper before the row's
                # weights (a 4-token verify: 0.85x the time of the same lines between blocks)
                slots = nrows * (P // L)
                interleave = 2 * slots < _const(page_lines)
                spread_rows = [IfThenElse(spread[0] & ~interleave if whole else spread[0], _for(
                    jp, row * count // nrows, (row + 1) * count // nrows - row * count // nrows, spread[1](jp)))]
                if whole:
                    per = (page_lines + slots - 1) // slots
                    slot = row * (P // L) + j7
                    prefetching = _for(j7, 0, nf, seq(_for(cl, slot * per, min_(slot * per + per, _const(page_lines))
                                                           - slot * per, spread[2](cl)), exps))
                    exp_loop = IfThenElse(spread[0] & interleave, prefetching, exp_loop)
            return visible(Allocate(lanes, seq(
                *spread_rows,
                *([] if whole else [_for(j8, 0, lo, BufferStore(s, _f(0.0), (row * P + j8,)), "vectorized")]),
                _for(l3, 0, _const(L), BufferStore(lanes, l[row * L + l3] * rescale[row], (l3,)), "vectorized"),
                exp_loop,
                *([] if whole else [
                    _for(j8, lo + nf * L, hi - lo - nf * L, BufferStore(
                        s, softmax_exp(score(j8) - m[row]), (row * P + j8,)), "vectorized"),
                    _for(j8, hi, count - hi, BufferStore(s, _f(0.0), (row * P + j8,)), "vectorized")]),
                _for(l3, 0, _const(L), BufferStore(l, lanes[l3], (row * L + l3,)), "vectorized"),
                *([] if whole else [_for(j3, lo + nf * L, hi - lo - nf * L,
                                         BufferStore(l, l[row * L] + score(j3), (row * L,)))]))), whole)

        # the chunk is whole for every query of the tile when it has P keys, the first query sees
        # its last key and (windowed) the last query's window starts at or before its first key
        whole_chunk = (count == _const(P)) & (pos0 + P <= st + t0 + 1) & (skip == _ZERO)
        if windowed:
            whole_chunk = whole_chunk & (window_lo(tq - 1) <= pos0)
        softmax = seq(new_max(False), shift, weights(False))
        # (with the pv dots too: a query that sees a whole chunk gets the same operations in both
        # forms, lo = 0 and hi = P leaving the partial form no tails, so a chunk whole in a decode
        # step and partial for the first queries of a verify gives that query the same bits)
        if P % L == 0:  # the whole-chunk form has no tails
            softmax = IfThenElse(whole_chunk, seq(new_max(True), shift, weights(True)), softmax)
        j5, l2, r3, dc, u3, i3 = (_v(n) for n in ("j5", "l2", "r3", "dc", "u3", "i3"))
        column = dc * DW + l2

        def value_rows(r0: Any, rows: int, first: Any = None) -> Stmt:
            """acc of the `rows` state rows from r0 += weights x V: a register tile of rows x DW
            accumulators over the chunk's keys, each value row loaded once per tile."""
            areg = Buffer("areg", (_const(rows * DW),), "float32")
            slot_a = r3 * DW + l2

            def key_loop(prefetching: bool) -> Stmt:
                """The chunk's keys into the tile (`prefetching`: each with its share of spread[1])."""
                return _for(j5, 0, count, seq(
                    *([spread[1](j5)] if prefetching else []),
                    _for(r3, 0, _const(rows), _for(l2, 0, _const(DW), BufferStore(
                        areg, areg[slot_a] + s[(r0 + r3) * P + j5] * vload(j5, column), (slot_a,)), "vectorized"),
                         "unrolled")))
            return _for(dc, 0, _const(D // DW), Allocate(areg, seq(
                _for(r3, 0, _const(rows), _for(l2, 0, _const(DW), BufferStore(
                    areg, acc[(r0 + r3) * D + column] * rescale[r0 + r3], (slot_a,)), "vectorized"), "unrolled"),
                key_loop(False) if spread is None else IfThenElse(first & (dc == 0) & spread[0], key_loop(True),
                                                                   key_loop(False)),
                _for(r3, 0, _const(rows), _for(l2, 0, _const(DW), BufferStore(
                    acc, areg[slot_a], ((r0 + r3) * D + column,)), "vectorized"), "unrolled"))))

        values = seq(
            _for(u3, 0, tq // U, value_rows(u3 * (U * G), U * G, u3 == 0)),
            _for(i3, tq // U * U, tq - tq // U * U, value_rows(i3 * G, G, (tq // U == 0) & (i3 == 0))))
        if pv:
            values = value_tiles(count, vblock)
        body = seq(scores, softmax, values)
        return Allocate(ktail, body) if tail_block and not tiled else body

    per_line = 64 // (2 if narrow else 4)  # elements per 64-byte line
    page_lines = -(-(D * P) // per_line)  # lines of a page's keys (and of its values) of one head
    lines_per_key = -(-page_lines // P)

    def prefetch_line(page: Any, c: Any) -> Stmt:
        """Prefetch line c of the keys (D x P) and line c of the values (P x D) of head kh in `page`."""
        first = c * per_line
        key_line = (kp[page, kh, first // (2 * P), first // 2 % P, first % 2] if bf16
                    else kp[page, kh, first // P, first % P])
        value_line = (vp[page, kh, first // (2 * D), first // 2 % D, first % 2] if bf16
                      else vp[page, kh, first // D, first % D])
        return seq(Evaluate(Call("prefetch", (key_line, IntImm(0, "int32")), "int32")),
                   Evaluate(Call("prefetch", (value_line, IntImm(0, "int32")), "int32")))

    def prefetch_page(page: Any) -> Stmt:
        """Prefetch the keys (D x P) and values (P x D) of head kh in `page`, one cache line at a
        time: the pages of a sequence are scattered in the pool, so the hardware's stream
        prefetcher, which stops at each 4 KiB memory page, would start over at every one."""
        c = _v("pf")
        return _for(c, 0, _const(page_lines), prefetch_line(page, c))

    def prefetch_spread(page: Any, key: Any) -> Stmt:
        """The lines of `page` that key `key` of a whole chunk (P keys) prefetches: lines_per_key
        of its keys and of its values, so that the chunk's P keys cover the page.  The line is
        tested against the page's lines even where every key < P has one: the pv dots spread the
        keys over the rows (key = row * count // rows ...), whose bound the prover need not find
        (a nonlinear division) once the test states it."""
        c = _v("pfs")
        body = IfThenElse(key * lines_per_key + c < page_lines, prefetch_line(page, key * lines_per_key + c))
        return _for(c, 0, _const(lines_per_key), body)

    def cached_run(lo_slot: Any, count: Any, lo_pos: Any, windowed: bool) -> Stmt:
        """Keys of `count` consecutive slots from lo_slot (no wrap, positions from lo_pos), page by page.
        Tiled, a window's chunk that starts inside its page starts at the whole block of
        BF16_BLOCK keys that holds its first key instead, the keys before it seen by no query
        (chunk's `skip`): every score block is then read in place, none past the page's end
        (a block that passes it is copied first, key by key: score_tiles)."""
        pi, pg, a, e, ab = _v("pi"), _v("pg"), _v("a"), _v("e"), _v("ab")
        count = max_(count, _const(0))
        first = lo_slot // P
        pages = (lo_slot + count + (P - 1)) // P - first
        pn = _v("pn")
        # a run of more than PREFETCH_PAGES pages prefetches its first page, then each page's
        # successor while this one is computed (a short run, a streaming cache's, stays in cache
        # between steps: its prefetches would only cost instructions)
        # (the next page's prefetches are spread over this page's key loop when this page is a
        # whole chunk: issued at once, as for the first page, they stall the core while the
        # cache's few outstanding-miss slots drain, and this page's arithmetic waits with them)
        long_run = pages > PREFETCH_PAGES
        has_next = long_run & (pi + 1 < first + pages)
        whole_page = (a == 0) & (e == P)
        page_body = _let(pg, _i64(table[b, pi]), _let(
            pn, _i64(table[b, min_(pi + 1, first + pages - 1)]), seq(
                _assume((pg >= 0) & (pg < N) & (pn >= 0) & (pn < N)),
                IfThenElse(long_run & (pi == first), prefetch_page(pg)),
                _let(a, max_(lo_slot, pi * P) - pi * P, _let(e, min_(lo_slot + count, pi * P + P) - pi * P, _let(
                    ab, a - a % BF16_BLOCK if tiled and windowed else a, seq(
                        IfThenElse(has_next & ~whole_page, prefetch_page(pn)),
                        chunk(e - ab, lo_pos + (pi * P + ab - lo_slot), windowed,
                              lambda dd, jj: load(key_at(pg, dd, ab + jj)), lambda jj, dd: load(value_at(pg, ab + jj, dd)),
                              _const(P) - ab, lambda dp, jj, ee: kp[pg, kh, dp, ab + jj, ee], _const(2 * P),
                              (has_next & whole_page, lambda jj: prefetch_spread(pn, jj),
                               lambda cc: prefetch_line(pn, cc)),
                              (lambda pr, dd, ee: vp[pg, kh, pr, dd, ee], ab) if pv else None, skip=a - ab))))))))
        return _for(pi, first, pages, page_body)

    def new_run(lo: Any, count: Any, windowed: bool) -> Stmt:
        """The call's own keys t' in [lo, lo + count), from kt and v, in chunks of P."""
        ci, a, e = _v("ci"), _v("a"), _v("e")
        count = max_(count, _const(0))
        body = _let(a, lo + ci * P, _let(e, min_(lo + count, lo + ci * P + P), chunk(
            e - a, st + a, windowed, lambda dd, jj: kt[dd, a + jj], lambda jj, dd: stored(v[b, a + jj, kh, dd]),
            T + BF16_BLOCK - a if tiled else T - a, lambda dp, jj, ee: ktp[dp, a + jj, ee],
            2 * (T + BF16_BLOCK), None, (lambda pr, dd, ee: vtp[pr, dd, ee], a) if pv else None)))
        return _for(ci, 0, (count + (P - 1)) // P, body)

    # Positions the tile's queries read (module docstring): the union over its queries of the sinks
    # [0, min(sinks, pos + 1)) and the windows [max(sinks, pos + 1 - window), pos + 1), i.e. from the
    # first query's window start to the last query's position; positions < st come from the pages.
    def total_sum(row: Any) -> tuple[Stmt, ...]:
        """The row's L partial sums folded into its first, by halving."""
        steps, half, lane = [], L // 2, _v("lt")
        while half >= 1:
            steps.append(_for(lane, 0, _const(half), BufferStore(
                l, l[row * L + lane] + l[row * L + lane + half], (row * L + lane,)), "vectorized"))
            half //= 2
        return tuple(steps)

    wlo, sink_old, w1, w1s, n1 = _v("wlo"), _v("sink_old"), _v("w1"), _v("w1s"), _v("n1")
    nlo, nsink_hi, last = _v("nlo"), _v("nsink_hi"), _v("last")
    # amx_pv, aligned: the call's keys and values are stored first and every position up to the
    # tile's last query is read through the pages (he, the end of what the pages give, is the
    # tile's last position + 1), so a query's chunks are its pages whatever call it is in; that
    # needs every position a query sees to be still in its slot after the call's stores: the
    # sequence fits the ring, or the call and the window fit it together.  Otherwise (a streaming
    # ring shorter than the call and its window) the call's own keys come from k and v (he = st).
    aligned = ((st + T <= sinks + ring) | (T + window <= ring + 1)) if pv else None
    he = _v("he") if pv else st
    # the window's cached keys: from slot w1s to the ring's end, then from the ring's start (the
    # second run empty unless the window wraps); one loop over the two runs, so the page loop's
    # code is generated once for both (each copy is a few hundred lines of C)
    wr = _v("wr")
    first_run = wr == 0
    old_window = _let(w1, max_(wlo, _const(0)), _let(
        w1s, sinks + (w1 - sinks) % ring, _let(n1, min_(he - w1, sinks + ring - w1s), _for(wr, 0, _const(2), cached_run(
            select(first_run, w1s, sinks), select(first_run, n1, he - w1 - n1), select(first_run, w1, w1 + n1),
            True)))))
    tile_parts = _let(wlo, window_lo(_ZERO), seq(
            _for(r, 0, _const(R), seq(
                BufferStore(m, _f(_LOWEST), (r,)), BufferStore(mx, _f(_LOWEST), (r,))), "vectorized"),
            _for(r, 0, _const(R * L), BufferStore(l, _f(0.0), (r,)), "vectorized"),
            _for(i, 0, tq, _for(g, 0, _const(G), seq(
                _for(d, 0, _const(D), seq(
                    BufferStore(acc, _f(0.0), ((i * G + g) * D + d,)),
                    *query_stores(q[b, t0 + i, kh * G + g, d] * _f(scale), (i * G + g) * D + d)),
                     "vectorized")))),
            _let(sink_old, min_(sinks, he), cached_run(_const(0), sink_old, _const(0), False)),
            old_window,
            _let(nsink_hi, min_(sinks, last + 1), new_run(he - st, nsink_hi - he, False)),
            _let(nlo, max_(max_(he, sinks), wlo), new_run(nlo - st, last + 1 - nlo, True)),
            _for(i, 0, tq, _for(g, 0, _const(G), seq(*total_sum(i * G + g), _for(d, 0, _const(D), BufferStore(
                out, acc[(i * G + g) * D + d] / l[(i * G + g) * L], (b, t0 + i, kh * G + g, d)), "vectorized"))))))
    if pv:
        tile_parts = _let(he, select(aligned, last + 1, st), tile_parts)
    tile = _let(t0, tg * QT, _let(tq, min_(_const(QT), T - t0), _let(last, st + t0 + tq - 1, tile_parts)))

    slot, wp, wt, wd = _v("slot"), _v("wp"), _v("wt"), _v("wd")
    store_new = _for(wt, 0, T, _let(slot, select(st + wt < sinks, st + wt, sinks + (st + wt - sinks) % ring), _let(
        wp, _i64(table[b, slot // P]), seq(
            _assume((wp >= 0) & (wp < N)),
            _for(wd, 0, _const(D), seq(
                BufferStore(kp, Cast(kv_dtype, k[b, wt, kh, wd]) if narrow else k[b, wt, kh, wd],
                            (wp, kh, wd // 2, slot % P, wd % 2) if bf16 else (wp, kh, wd, slot % P)),
                BufferStore(vp, Cast(kv_dtype, v[b, wt, kh, wd]) if narrow else v[b, wt, kh, wd],
                            (wp, kh, slot % P // 2, wd, slot % 2) if bf16 else (wp, kh, slot % P, wd))))))))

    if tiled:  # the call's keys in pairs, then a block of zero keys
        e7 = _v("e7")
        transpose = seq(
            _for(t, 0, T, _for(d, 0, _const(D // 2), _for(e7, 0, _const(2), BufferStore(
                ktp, Cast(kv_dtype, k[b, t, kh, d * 2 + e7]), (d, t, e7))))),
            _for(d, 0, _const(D // 2), _for(t, T, _const(BF16_BLOCK), _for(e7, 0, _const(2), BufferStore(
                ktp, FloatImm(0.0, kv_dtype), (d, t, e7))))))
        if pv:  # the call's values in pairs along t, then zero keys
            transpose = seq(
                transpose,
                _for(t, 0, T, _for(d, 0, _const(D), BufferStore(
                    vtp, Cast(kv_dtype, v[b, t, kh, d]), (t // 2, d, t % 2)))),
                _for(t, T, (T + 1) // 2 * 2 + BF16_BLOCK - T, _for(d, 0, _const(D), BufferStore(
                    vtp, FloatImm(0.0, kv_dtype), (t // 2, d, t % 2)))))
    else:
        transpose = _for(t, 0, T, _for(d, 0, _const(D), BufferStore(kt, stored(k[b, t, kh, d]), (d, t))))
    body = _let(b, bh // H, _let(kh, bh % H, _let(st, _i64(start[b]), seq(
        # the cache's contract (PagedKVCache checks it before every call): the table covers every
        # slot, and a sequence either fits the ring or reads no further back than the ring holds
        _assume((st >= 0) & (sinks >= 0) & (ring > 0) & (window > 0) & (M * P >= sinks + ring)
                & ((st + T <= sinks + ring) | (window <= ring))),
        *((IfThenElse(aligned, store_new),) if pv else ()),
        *((Evaluate(Call("call_extern", (StringImm("refcomp_amx_configure"),), "int32")),) if pv and amx else ()),
        # (aligned, every key is read through the pages: the call's own keys in pairs, which only
        # new_run reads, are not needed)
        IfThenElse(~aligned, transpose) if pv else transpose, _for(tg, 0, (T + (QT - 1)) // QT, tile),
        IfThenElse(~aligned, store_new) if pv else store_new))))
    for buffer in ((ktp, qbf) if tiled else (kt,)) + ((wbf, pvb, vtp) if pv else ()) + (
            rescale, mx, top, l, m, s, acc, qs):
        body = Allocate(buffer, body)
    loop = For(bh, _const(0), B * H, "parallel", body)
    suffix = {"float32": "", "float16": "_f16", "bfloat16": "_bf16"}[kv_dtype] + {
        "fp32": "", "avx512bf16": "_tiles", "amx": "_amx", "amx_pv": "_amxpv", "avx512bf16_pv": "_tilespv"}[dot]
    attrs = None
    if tiled:
        helpers = (((BF16_VALUES_AMX,) if pv else (BF16_SCORES_AMX_32X32,)) if amx else
                   tile_intrin.c_helpers + ((BF16_VALUES_AVX512BF16,) if pv else ()))
        attrs = {"c_helpers": helpers, "c_includes": tile_intrin.c_includes, **tile_intrin.func_attrs}
    return PrimFunc((q, k, v, kp, vp, table, start, out, sinks, ring, window), loop,
                    f"paged_attention_g{G}_d{D}_p{P}_h{H}" + suffix, attrs)


def compiled_attention(group: int, head_dim: int, page_size: int, kv_heads: int, kv_dtype: str = "float32",
                       dot: str | None = None) -> Any:
    """The attention kernel built with every access proved in bounds (bounds="prove"); `dot`
    defaults to `default_dot` on this CPU."""
    dot = default_dot(kv_dtype, head_dim, page_size) if dot is None else dot
    return _compiled_attention(group, head_dim, page_size, kv_heads, kv_dtype, dot)


@functools.lru_cache(maxsize=None)
def _compiled_attention(group: int, head_dim: int, page_size: int, kv_heads: int, kv_dtype: str, dot: str) -> Any:
    return build(attention_func(group, head_dim, page_size, kv_heads, kv_dtype, dot), bounds="prove")


class PagedAttention:
    """The attention kernel as the model calls it, once per layer and step.

    The first call with a given set of shapes and scalars goes through the kernel's full argument
    check (shapes against the signature, overlap of written buffers); the converted scalar and
    size arguments are kept, and later calls with identical shapes, dtypes and scalars only
    re-check those cheaply and pass the new data pointers.  A decode step calls the kernel once
    per layer with the same shapes, where the full check would cost more than the kernel.
    """

    ARRAYS = ("q", "k", "v", "k_pages", "v_pages", "table", "start", "out")

    def __init__(self, group: int, head_dim: int, page_size: int, kv_heads: int, kv_dtype: str = "float32",
                 dot: str | None = None) -> None:
        self.kernel = compiled_attention(group, head_dim, page_size, kv_heads, kv_dtype, dot)
        self._templates: dict[tuple, tuple[list, list[int], list[str]]] = {}

    def __call__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, k_pages: np.ndarray, v_pages: np.ndarray,
                 table: np.ndarray, start: np.ndarray, out: np.ndarray, sinks: int, ring: int, window: int) -> None:
        arrays = (q, k, v, k_pages, v_pages, table, start, out)
        key = tuple((a.shape, a.dtype.str) for a in arrays) + (sinks, ring, window)
        template = self._templates.get(key)
        if template is None or not all(a.flags.c_contiguous for a in arrays):
            self.kernel(*arrays, sinks, ring, window)  # the checked call
            if all(a.flags.c_contiguous for a in arrays) and len({id(a) for a in arrays}) == len(arrays):
                self._templates[key] = self._template(arrays, (sinks, ring, window))
            return
        values, slots, types = template
        values = list(values)
        cast = self.kernel._ffi.cast
        for slot, ctype, array in zip(slots, types, arrays):
            values[slot] = cast(ctype, array.__array_interface__["data"][0])
        code = self.kernel._entry(*values)
        if code != 0:
            raise self.kernel._failure(code)

    def _template(self, arrays: tuple, scalars: tuple) -> tuple[list, list[int], list[str]]:
        values, _ = self.kernel._c_arguments(arrays + scalars, {})
        slots = [i for i, p in enumerate(self.kernel.module.params) if p.kind == "buffer"]
        return list(values), slots, list(self.kernel._pointer_types)
