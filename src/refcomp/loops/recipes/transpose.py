"""A 32 x 16 fp32 transpose tile (two 16 x 16 in registers) for packing a `linear` weight W[j, k]
into k-major panels.

The matmul recipes pack B into panels Bp[j // NR, k, j % NR]; from W[j, k] that copy is a
transpose.  Element by element (or by gathers) it cost a sixth of the whole 256 x 4096 x 1024
product on one core; in registers (16 loads, 64 shuffles, 16 stores per 256 floats) the product
runs within 3% of one with a row-major B.  The intrinsic is registered when this module is
imported, under the name TRANSPOSE_32X16; tensorize matches it against a tile of the copy that
builds 16 k-rows of one 32-wide panel (the panel index j // 32 stays outside the tile).
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

_C_TRANSPOSE = r"""
#include <immintrin.h>
#include <stdint.h>
/* P[c, r] = W[r, c] for a 16 x 16 tile: unpack pairs of rows (ps, then pd) into 4 x 4 blocks
   per 128-bit lane, then gather the lanes of four such registers into each output row. */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_f32_16x16(
    const float* restrict W, int64_t ldw, float* restrict P, int64_t ldp) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(W + i * ldw);
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
    _mm512_storeu_ps(P + (0 + c) * ldp, _mm512_shuffle_f32x4(t0, t2, 0x88));
    _mm512_storeu_ps(P + (4 + c) * ldp, _mm512_shuffle_f32x4(t1, t3, 0x88));
    _mm512_storeu_ps(P + (8 + c) * ldp, _mm512_shuffle_f32x4(t0, t2, 0xdd));
    _mm512_storeu_ps(P + (12 + c) * ldp, _mm512_shuffle_f32x4(t1, t3, 0xdd));
  }
}
/* P[k, j] = W[j, k] for 32 rows j and 16 columns k */
__attribute__((target("avx512f"))) static inline void refcomp_transpose_f32_32x16(
    const float* restrict W, int64_t ldw, float* restrict P, int64_t ldp) {
  refcomp_transpose_f32_16x16(W, ldw, P, ldp);
  refcomp_transpose_f32_16x16(W + 16 * ldw, ldw, P + 16, ldp);
}
"""


def _transpose_intrin() -> registry.TensorIntrin:
    ldw, ldp = Var("ldw"), Var("ldp")
    w = Buffer("W", (32, 16), to_dtype("float32"), strides=(ldw, 1))
    p = Buffer("P", (16, 32), to_dtype("float32"), strides=(ldp, 1))
    j, k, vj, vk = Var("j"), Var("k"), Var("vj"), Var("vk")
    block = Block("copy", (IterVar(vj, Range.from_extent(32)), IterVar(vk, Range.from_extent(16))),
                  reads=(BufferRegion(w, (Range(vj, 1), Range(vk, 1))),),
                  writes=(BufferRegion(p, (Range(vk, 1), Range(vj, 1))),),
                  body=BufferStore(p, w[vj, vk], (vk, vj)))
    nest = BlockRealize((j, k), IntImm(1, "bool"), block)
    nest = For(k, 0, 16, "serial", For(j, 0, 32, "serial", nest))
    desc = PrimFunc((w, p), nest, name="refcomp_transpose_f32_32x16_desc")
    address = lambda buf: Call("address_of", (buf.vload((0, 0)),), "handle")  # noqa: E731
    impl = PrimFunc((w, p), Evaluate(Call("call_extern", (StringImm("refcomp_transpose_f32_32x16"), address(w), ldw,
                                                          address(p), ldp), "int32")),
                    name="refcomp_transpose_f32_32x16")
    return registry.TensorIntrin(TRANSPOSE_32X16, desc, impl, c_helpers=(_C_TRANSPOSE,),
                                 c_includes=("immintrin.h", "stdint.h"), cpu_features=("avx512f",),
                                 doc="P[16, 32] = W[32, 16]^T (fp32, AVX-512 shuffles)")


def transpose_intrin() -> registry.TensorIntrin:
    """The registered transpose tile."""
    try:
        return registry.get(TRANSPOSE_32X16)
    except ScheduleError:  # unregistered by a user since this module was imported
        return registry.register(_transpose_intrin())


# Registered on import (of refcomp.loops.recipes), so a recipe's trace replays by name.
transpose_intrin()
