"""Transposes in registers: a 32 x 16 fp32 tile for packing a `linear` weight W[j, k] into k-major
panels, and the tile transposes that write a convolution's register tile back in NCHW order.

The matmul recipes pack B into panels Bp[j // NR, k, j % NR]; from W[j, k] that copy is a
transpose.  Element by element (or by gathers) it cost a sixth of the whole 256 x 4096 x 1024
product on one core; in registers (16 loads, 64 shuffles, 16 stores per 256 floats) the product
runs within 3% of one with a row-major B.  The intrinsic is registered when this module is
imported, under the name TRANSPOSE_32X16; tensorize matches it against a tile of the copy that
builds 16 k-rows of one 32-wide panel (the panel index j // 32 stays outside the tile).

The convolution's channel-vector tile holds acc[position, channel] (a vector of channels per
position); the output wants out[channel, position].  tile_transpose_intrin(rows, columns, 16)
turns a tile of rows x columns positions (at most 16) by 16 channels around in one pass of the
same 16 x 16 network, the missing rows zero and the stores masked to the positions there are.
"""
from __future__ import annotations

from ...ast import (
    Block, BlockRealize, Buffer, BufferRegion, BufferStore, Call, Evaluate, For, IntImm, IterVar, PrimFunc,
    Range, StringImm, Var,
)
from ...ast.dtype import dtype as to_dtype
from ...errors import ScheduleError
from ..intrin import registry

TRANSPOSE_32X16 = "x86.avx512.transpose_f32_32x16"

_C_NETWORK_16 = r"""
#include <immintrin.h>
/* In registers: r[j] becomes column j of the 16 x 16 block whose row i was r[i].  Unpack pairs of
   rows (ps, then pd) into 4 x 4 blocks per 128-bit lane, then gather the lanes of four such
   registers into each column. */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_16x16_f32(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  /* r[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3 */
  for (int c = 0; c < 4; ++c) {
    __m512 t0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), t1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    __m512 t2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    __m512 t3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    t[c] = _mm512_shuffle_f32x4(t0, t2, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(t1, t3, 0x88);
    t[8 + c] = _mm512_shuffle_f32x4(t0, t2, 0xdd);
    t[12 + c] = _mm512_shuffle_f32x4(t1, t3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}
"""

_C_TRANSPOSE_ROWS_16 = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stddef.h>
/* P[c, r] = W[r, c] for c < 16 and the first `rows` (1..16) rows r of W: the rows loaded (zeros
   past `rows`), the 16 x 16 network, and the first `rows` lanes of each column stored. */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_f32_16_rows(
    const float* restrict W, ptrdiff_t ldw, float* restrict P, ptrdiff_t ldp, int rows) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_ps(W + i * ldw) : _mm512_setzero_ps();
  refcomp_transpose_16x16_f32(r);
  const __mmask16 m = (__mmask16)(rows >= 16 ? 0xffffu : (1u << rows) - 1u);
  for (int c = 0; c < 16; ++c) _mm512_mask_storeu_ps(P + c * ldp, m, r[c]);
}
/* The rows form addressed as a tile intrinsic calls it: the strides are the distances from each
   tile's first row to its second (the tiles may be stack arrays whose layout the C target sets). */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_tile_f32x16(
    const float* W, const float* W_next, float* P, float* P_next, int rows) {
  refcomp_transpose_f32_16_rows(W, W_next - W, P, P_next - P, rows);
}
"""

_C_TRANSPOSE = r"""
/* P[k, j] = W[j, k] for 32 rows j and 16 columns k */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_f32_32x16(
    const float* restrict W, int64_t ldw, float* restrict P, int64_t ldp) {
  refcomp_transpose_f32_16_rows(W, ldw, P, ldp, 16);
  refcomp_transpose_f32_16_rows(W + 16 * ldw, ldw, P + 16, ldp, 16);
}
"""


def _transpose_desc(rows: int, columns: int, name: str, names: tuple[str, str] = ("W", "P"),
                    rows_outer: bool = False) -> PrimFunc:
    """P[columns, rows] = W[rows, columns]^T over fp32 tiles with row strides ld<w> and ld<p>
    (`names` the two buffers), the loop over columns outside the one over rows unless rows_outer."""
    src, dst = names
    ldw, ldp = Var("ld" + src.lower()), Var("ld" + dst.lower())
    w = Buffer(src, (rows, columns), to_dtype("float32"), strides=(ldw, 1))
    p = Buffer(dst, (columns, rows), to_dtype("float32"), strides=(ldp, 1))
    j, k, vj, vk = Var("j"), Var("k"), Var("vj"), Var("vk")
    block = Block("copy", (IterVar(vj, Range.from_extent(rows)), IterVar(vk, Range.from_extent(columns))),
                  reads=(BufferRegion(w, (Range(vj, 1), Range(vk, 1))),),
                  writes=(BufferRegion(p, (Range(vk, 1), Range(vj, 1))),),
                  body=BufferStore(p, w[vj, vk], (vk, vj)))
    realize = BlockRealize((j, k), IntImm(1, "bool"), block)
    if rows_outer:
        nest = For(j, 0, rows, "serial", For(k, 0, columns, "serial", realize))
    else:
        nest = For(k, 0, columns, "serial", For(j, 0, rows, "serial", realize))
    return PrimFunc((w, p), nest, name=name)


def _address_distance_impl(desc: PrimFunc, function: str) -> PrimFunc:
    """The call of a transpose whose strides are passed as the distance between two addresses
    (row 0 and row 1 of each tile), so the tiles may live in buffers the C target compacts."""
    w, p = desc.params
    address = lambda buf, index: Call("address_of", (buf.vload(index),), "handle")  # noqa: E731
    return PrimFunc((w, p), Evaluate(Call("call_extern", (
        StringImm(function), address(w, (0, 0)), address(w, (1, 0)), address(p, (0, 0)), address(p, (1, 0))),
        "int32")), name=function)


def _transpose_intrin() -> registry.TensorIntrin:
    desc = _transpose_desc(32, 16, "refcomp_transpose_f32_32x16_desc")
    w, p = desc.params
    ldw, ldp = w.strides[0], p.strides[0]
    address = lambda buf: Call("address_of", (buf.vload((0, 0)),), "handle")  # noqa: E731
    impl = PrimFunc((w, p), Evaluate(Call("call_extern", (StringImm("refcomp_transpose_f32_32x16"), address(w), ldw,
                                                          address(p), ldp), "int32")),
                    name="refcomp_transpose_f32_32x16")
    return registry.TensorIntrin(TRANSPOSE_32X16, desc, impl, c_helpers=(_C_NETWORK_16, _C_TRANSPOSE_ROWS_16, _C_TRANSPOSE),
                                 c_includes=("immintrin.h", "stdint.h"), cpu_features=("avx512f",),
                                 operand_access=("read", "write"), doc="P[16, 32] = W[32, 16]^T (fp32, AVX-512 shuffles)")


def transpose_intrin() -> registry.TensorIntrin:
    """The registered transpose tile."""
    try:
        return registry.get(TRANSPOSE_32X16)
    except ScheduleError:  # unregistered by a user since this module was imported
        return registry.register(_transpose_intrin())


# The same 32 x 16 transpose with each stride passed as the distance between two addresses (the
# first row and the next), so that the tiles it reads and writes may be buffers the C target
# compacts: a `linear` weight's panels packed block by block inside the parallel loop of the
# matmul recipe (a per-thread buffer of one NC x KC block, which keeps its size only when every
# call writing it is relocatable; see refcomp.loops.passes.compact_buffers).
TRANSPOSE_32X16_AT = "x86.avx512.transpose_f32_32x16_at"

_C_TRANSPOSE_AT = r"""
/* refcomp_transpose_f32_32x16 with its strides as address distances */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_f32_32x16_at(
    const float* W, const float* W_next, float* P, float* P_next) {
  refcomp_transpose_f32_32x16(W, W_next - W, P, P_next - P);
}
"""


def _transpose_at_intrin() -> registry.TensorIntrin:
    base = transpose_intrin()
    function = "refcomp_transpose_f32_32x16_at"
    impl = _address_distance_impl(base.desc, function)
    return registry.TensorIntrin(TRANSPOSE_32X16_AT, base.desc, impl,
                                 c_helpers=(_C_NETWORK_16, _C_TRANSPOSE_ROWS_16, _C_TRANSPOSE, _C_TRANSPOSE_AT),
                                 c_includes=("immintrin.h", "stdint.h", "stddef.h"), cpu_features=("avx512f",),
                                 func_attrs={"relocatable_calls": (function,)},
                                 operand_access=("read", "write"), doc="P[16, 32] = W[32, 16]^T (fp32, AVX-512 shuffles; strides as address "
                                     "distances)")


def transpose_at_intrin() -> registry.TensorIntrin:
    """The registered relocatable transpose tile (TRANSPOSE_32X16_AT)."""
    try:
        return registry.get(TRANSPOSE_32X16_AT)
    except ScheduleError:
        return registry.register(_transpose_at_intrin())


# AVX2: 16-wide panels (the 6 x 16 tile's) from W[j, k], eight k-rows at a time, by two 8 x 8
# transposes in registers; the strides as address distances (relocatable), as the form above.
TRANSPOSE_16X8_AT = "x86.avx2.transpose_f32_16x8_at"

_C_TRANSPOSE_16X8_AT = r"""
#include <immintrin.h>
#include <stddef.h>
/* In registers: r[c] becomes column c of the 8 x 8 block whose row i was r[i]: pairs of rows
   interleaved, then pairs of pairs, then the 128-bit halves exchanged. */
__attribute__((target("avx2"))) static inline void refcomp_transpose_8x8_f32(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
}
/* P[c, j] = W[j, c] for 16 rows j and 8 columns c; each stride the distance to the next row */
__attribute__((target("avx2"))) static inline void refcomp_transpose_f32_16x8_at(
    const float* W, const float* W_next, float* P, float* P_next) {
  const ptrdiff_t ldw = W_next - W, ldp = P_next - P;
  for (int h = 0; h < 2; ++h) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(W + (8 * h + i) * ldw);
    refcomp_transpose_8x8_f32(r);
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(P + c * ldp + 8 * h, r[c]);
  }
}
"""


def _transpose_16x8_at_intrin() -> registry.TensorIntrin:
    desc = _transpose_desc(16, 8, "refcomp_transpose_f32_16x8_desc")
    function = "refcomp_transpose_f32_16x8_at"
    impl = _address_distance_impl(desc, function)
    return registry.TensorIntrin(TRANSPOSE_16X8_AT, desc, impl, c_helpers=(_C_TRANSPOSE_16X8_AT,),
                                 c_includes=("immintrin.h", "stddef.h"), cpu_features=("avx2",),
                                 func_attrs={"relocatable_calls": (function,)},
                                 operand_access=("read", "write"), doc="P[8, 16] = W[16, 8]^T (fp32, AVX2 shuffles; strides as address distances)")


def transpose_16x8_intrin() -> registry.TensorIntrin:
    """The registered AVX2 transpose tile for 16-wide panels (TRANSPOSE_16X8_AT)."""
    try:
        return registry.get(TRANSPOSE_16X8_AT)
    except ScheduleError:
        return registry.register(_transpose_16x8_at_intrin())


# ----------------------------------------------------------------------------- tile transposes

# The vector widths a tile transpose exists for: lanes -> (name prefix, C function, C source,
# CPU feature).  AVX-512 only: on AVX2 an 8 x 8 transpose of the convolution tile (measured through
# the feature override on an AVX-512 machine) gained 5-8% on two 1x1 layers and lost 6% on a third.
_TILE_FORMS = {
    16: ("x86.avx512", "refcomp_transpose_tile_f32x16", _C_TRANSPOSE_ROWS_16, "avx512f"),
}


def tile_transpose_name(rows: int, columns: int, lanes: int) -> str:
    """The name of the intrinsic T[0:lanes, 0:rows, 0:columns] = A[0:rows, 0:columns, 0:lanes]
    transposed (without the rows dimension when rows is 1)."""
    shape = f"{columns}x{lanes}" if rows == 1 else f"{rows}x{columns}x{lanes}"
    return f"{_TILE_FORMS[lanes][0]}.transpose_tile_f32_{shape}"


def _tile_transpose(rows: int, columns: int, lanes: int) -> registry.TensorIntrin:
    """A[rows, columns, lanes] (positions x channels, as a convolution's register tile holds them)
    to T[lanes, rows, columns] (as NCHW holds them), the rows x columns positions one run of the
    C helper: so the implementation requires each of A's rows to follow the last column of the one
    before (as in a tile of whole output rows), which the caller guarantees."""
    prefix, function, source, feature = _TILE_FORMS[lanes]
    f32 = to_dtype("float32")
    o, vo = Var("o"), Var("vo")
    if rows == 1:
        lda, ldt = Var("lda"), Var("ldt")
        a = Buffer("A", (columns, lanes), f32, strides=(lda, 1))
        t = Buffer("T", (lanes, columns), f32, strides=(ldt, 1))
        position, loops = (Var("vx"),), (Var("x"),)
    else:
        ldr, ldc, ldo, ldy = Var("ldr"), Var("ldc"), Var("ldo"), Var("ldy")
        a = Buffer("A", (rows, columns, lanes), f32, strides=(ldr, ldc, 1))
        t = Buffer("T", (lanes, rows, columns), f32, strides=(ldo, ldy, 1))
        position, loops = (Var("vy"), Var("vx")), (Var("y"), Var("x"))
    extents = (columns,) if rows == 1 else (rows, columns)
    # the iter vars in the order of the copy's (the output's): channel, then positions
    ivs = (IterVar(vo, Range.from_extent(lanes)),) + tuple(
        IterVar(v, Range.from_extent(e)) for v, e in zip(position, extents))
    block = Block("copy", ivs,
                  reads=(BufferRegion(a, tuple(Range(v, 1) for v in (*position, vo))),),
                  writes=(BufferRegion(t, tuple(Range(v, 1) for v in (vo, *position))),),
                  body=BufferStore(t, a[(*position, vo)], (vo, *position)))
    nest: object = BlockRealize((o, *loops), IntImm(1, "bool"), block)
    nest = For(o, 0, lanes, "serial", nest)
    for loop, extent in reversed(tuple(zip(loops, extents))):
        nest = For(loop, 0, extent, "serial", nest)
    name = tile_transpose_name(rows, columns, lanes)
    desc = PrimFunc((a, t), nest, name=name.replace(".", "_") + "_desc")
    zero = (0,) * (a.ndim - 1)
    address = lambda buf, index: Call("address_of", (buf.vload(index),), "handle")  # noqa: E731
    # each stride passed as the distance from one position (one channel) to the next: the C target
    # may shrink a stack tile after tensorize, and the addresses follow it where a number would not
    impl = PrimFunc((a, t), Evaluate(Call("call_extern", (
        StringImm(function), address(a, zero + (0,)), address(a, zero[:-1] + (1, 0)),
        address(t, (0,) + zero), address(t, (1,) + zero), IntImm(rows * columns, "int32")), "int32")),
        name=name.replace(".", "_"))
    # relocatable: the C target may shrink the stack tiles it addresses (its strides are address
    # distances), and the copy's plain loads and the tile's plain stores show their regions
    return registry.TensorIntrin(name, desc, impl, c_helpers=(_C_NETWORK_16, source),
                                 c_includes=("immintrin.h", "stdint.h", "stddef.h"), cpu_features=(feature,),
                                 func_attrs={"relocatable_calls": (function,)},
                                 operand_access=("read", "write"), doc=f"T[{lanes}, {rows}, {columns}] = A[{rows}, {columns}, {lanes}] transposed "
                                     "(fp32, in registers)")


# ----------------------------------------------------------------------------- channel vectors

_C_CHANNEL_VECTORS_16 = r"""
#include <immintrin.h>
#include <stddef.h>
/* P[x, c] = A[c, x] for the 16 rows c of A and its first `columns` (1..16) columns x: the rows
   loaded masked to `columns` lanes, the 16 x 16 network, and the first `columns` rows of the
   result stored (each one vector of 16 channels). */
__attribute__((target("avx512f"))) static inline void refcomp_channel_vectors_f32x16(
    const float* A, const float* A_next, float* P, float* P_next, int columns) {
  const ptrdiff_t lda = A_next - A, ldp = P_next - P;
  const __mmask16 m = (__mmask16)(columns >= 16 ? 0xffffu : (1u << columns) - 1u);
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_ps(m, A + i * lda);
  refcomp_transpose_16x16_f32(r);
  for (int c = 0; c < columns && c < 16; ++c) _mm512_storeu_ps(P + c * ldp, r[c]);
}
"""

# lanes -> (name prefix, C function, C source, CPU feature), as _TILE_FORMS
_CHANNEL_VECTOR_FORMS = {
    16: ("x86.avx512", "refcomp_channel_vectors_f32x16", _C_CHANNEL_VECTORS_16, "avx512f"),
}


def channel_vectors_name(columns: int, lanes: int) -> str:
    """The name of the intrinsic T[0:columns, 0:lanes] = A[0:lanes, 0:columns] transposed."""
    return f"{_CHANNEL_VECTOR_FORMS[lanes][0]}.channel_vectors_f32_{lanes}x{columns}"


def _channel_vectors(columns: int, lanes: int) -> registry.TensorIntrin:
    """A[lanes, columns] (a row of `columns` positions of each of `lanes` channel planes, as NCHW
    holds them; any distance between the planes) to T[columns, lanes] (a vector of the channels
    per position, as a depthwise convolution's channel-vector form reads its input)."""
    prefix, function, source, feature = _CHANNEL_VECTOR_FORMS[lanes]
    name = channel_vectors_name(columns, lanes)
    desc = _transpose_desc(lanes, columns, name.replace(".", "_") + "_desc", names=("A", "T"), rows_outer=True)
    a, t = desc.params
    address = lambda buf, index: Call("address_of", (buf.vload(index),), "handle")  # noqa: E731
    # the strides as address distances (see _tile_transpose): the copy may be a compacted stack tile
    impl = PrimFunc((a, t), Evaluate(Call("call_extern", (
        StringImm(function), address(a, (0, 0)), address(a, (1, 0)), address(t, (0, 0)),
        address(t, (1 if columns > 1 else 0, 0)),  # one column: one row of T, no distance to a next
        IntImm(columns, "int32")), "int32")), name=name.replace(".", "_"))
    return registry.TensorIntrin(name, desc, impl, c_helpers=(_C_NETWORK_16, source),
                                 c_includes=("immintrin.h", "stddef.h"), cpu_features=(feature,),
                                 func_attrs={"relocatable_calls": (function,)},
                                 operand_access=("read", "write"), doc=f"T[{columns}, {lanes}] = A[{lanes}, {columns}] transposed (fp32, in registers)")


def channel_vectors_intrin(columns: int, lanes: int) -> registry.TensorIntrin | None:
    """The registered transpose of `columns` positions (1 to lanes) of `lanes` channel planes into
    one vector of channels per position, or None for another shape or vector."""
    if lanes not in _CHANNEL_VECTOR_FORMS or not 1 <= columns <= lanes:
        return None
    try:
        return registry.get(channel_vectors_name(columns, lanes))
    except ScheduleError:
        return registry.register(_channel_vectors(columns, lanes))


def tile_transpose_intrin(rows: int, columns: int, lanes: int) -> registry.TensorIntrin | None:
    """The registered transpose of a tile of rows x columns positions by `lanes` channels (2 <=
    rows * columns <= lanes, lanes 16), or None for another shape."""
    if lanes not in _TILE_FORMS or rows < 1 or columns < 1 or not 2 <= rows * columns <= lanes:
        return None
    if rows > 1 and columns < 2:
        return None
    try:
        return registry.get(tile_transpose_name(rows, columns, lanes))
    except ScheduleError:
        return registry.register(_tile_transpose(rows, columns, lanes))


# Registered on import (of refcomp.loops.recipes), so a recipe's trace replays by name.
transpose_intrin()
transpose_at_intrin()
transpose_16x8_intrin()
for _lanes in _TILE_FORMS:
    for _columns in range(2, _lanes + 1):
        for _rows in range(1, _lanes // _columns + 1):
            tile_transpose_intrin(_rows, _columns, _lanes)
for _lanes in _CHANNEL_VECTOR_FORMS:
    for _columns in range(1, _lanes + 1):
        channel_vectors_intrin(_columns, _lanes)
