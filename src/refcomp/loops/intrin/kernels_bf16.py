"""C micro-kernel for bf16 matmul tiles on AVX512-BF16: C[8, 32] (fp32) += A[8, K] (bf16) * B[K, 32] (bf16).

vdpbf16ps (`_mm512_dpbf16_ps`) takes 16 pairs of bf16 from each operand and adds, to each of
16 fp32 lanes, the two products of its pair.  Pairs run along k, so
  B is packed in pairs:  B[k, j] at B + (k/2)*ldb + j*2 + k%2   (one 64-byte row = 16 columns x 2 k)
  A[r, k] at A + r*a_rs + k*a_cs; the pair (A[r, k], A[r, k+1]) is broadcast as one 32-bit value
  C[r, j] (fp32) at C + r*ldc + j.  K is a multiple of 2.
Only min(m_rows, 8) rows are touched (a partial tile at the bottom edge of a matrix).

Numerics (spec/tensorize.md): the products of two bf16 values are exact in fp32; each instruction
adds its two products to the accumulator with round-to-nearest-even whatever MXCSR says, treats
denormal inputs as zero and flushes denormal results to zero, and raises no exceptions.  So the
result is an fp32 accumulation in pairs, not bit-identical to a one-product-at-a-time loop.
"""

BF16GEMM_AVX512BF16_8X32 = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#define RC_ROWS8(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
/* the bf16 pair (a[0], a[cs]) in every 32-bit lane: vdpbf16ps's A operand */
__attribute__((target("avx512f,avx512bf16"))) static inline __m512bh rc_bf16_pair(const uint16_t* a, int64_t cs) {
  uint32_t two;
  if (cs == 1) memcpy(&two, a, 4);
  else two = (uint32_t)a[0] | ((uint32_t)a[cs] << 16);
  return (__m512bh)_mm512_set1_epi32((int32_t)two);
}
/* rows rows of the tile (a constant after inlining: the rows' accumulators stay in registers and
   each B row pair is loaded once for all of them); every row adds its products in the order of k */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void rc_bf16gemm_rows(
    const uint16_t* restrict A, int64_t a_rs, int64_t a_cs, const uint16_t* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, const int rows) {
  __m512 c0[8], c1[8];
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r) {
    c0[r] = _mm512_loadu_ps(C + r * ldc);
    c1[r] = _mm512_loadu_ps(C + r * ldc + 16);
  }
  for (int64_t k = 0; k < K; k += 2) {
    const uint16_t* b = B + (k / 2) * ldb;
    const uint16_t* a = A + k * a_cs;
    /* 16 columns x 2 k per 64 bytes */
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(b + 32));
#pragma GCC unroll 8
    for (int r = 0; r < rows; ++r) {
      __m512bh ar = rc_bf16_pair(a + r * a_rs, a_cs);
      c0[r] = _mm512_dpbf16_ps(c0[r], ar, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], ar, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r) {
    _mm512_storeu_ps(C + r * ldc, c0[r]);
    _mm512_storeu_ps(C + r * ldc + 16, c1[r]);
  }
}
__attribute__((target("avx512f,avx512bf16"))) static inline void refcomp_bf16gemm_avx512bf16_8x32(
    const uint16_t* restrict A, int64_t a_rs, int64_t a_cs, const uint16_t* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  switch (m_rows < 8 ? m_rows : 8) {
#define RC_ROWS(n) case n: rc_bf16gemm_rows(A, a_rs, a_cs, B, ldb, C, ldc, K, n); break;
    RC_ROWS8(RC_ROWS)
#undef RC_ROWS
    default: break;
  }
}
#undef RC_ROWS8
"""


# Attention's weights (refcomp.llm.attention, dots "amx_pv" and "avx512bf16_pv"): float32 rows S
# (s_rs apart, finite) packed as the bfloat16 A operand of a weights x values tile: A[m, j] =
# S[m, j - off] rounded to bfloat16 (to nearest, ties to even) for off <= j < off + count, else 0,
# for j < K (a multiple of 16) and the m_rows rows (a_rs apart).  Row m of A depends only on row m of S.
BF16_PACK_WEIGHTS = r"""
#include <immintrin.h>
#include <stdint.h>
__attribute__((target("avx512f,avx512bw"))) static inline void refcomp_bf16_pack_weights(
    const float* S, int64_t s_rs, int64_t count, int64_t off, uint16_t* A, int64_t a_rs, int64_t K,
    int64_t m_rows) {
  for (int64_t r = 0; r < m_rows; ++r) {
    const float* srow = S + r * s_rs;
    uint16_t* arow = A + r * a_rs;
    for (int64_t j = 0; j < K; j += 16) {
      const int64_t first = j - off;  /* the source index of lane 0 */
      uint32_t mask = 0xFFFFu;
      if (first < 0) mask = -first >= 16 ? 0u : (mask << -first) & 0xFFFFu;
      if (first + 16 > count) {
        const int64_t keep = count - first;
        mask &= keep <= 0 ? 0u : (1u << keep) - 1u;
      }
      const __m512i x = _mm512_maskz_loadu_epi32((__mmask16)mask, (const void*)(srow + first));
      /* to nearest bfloat16, ties to even (finite weights; a masked lane's 0 stays 0) */
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
      const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), odd);
      _mm256_storeu_si256((__m256i*)(void*)(arow + j), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
  }
}
"""

# Attention's weights x values on the 8x32 tile above (dot "avx512bf16_pv"): the contract of
# kernels_amx's refcomp_bf16values_amx with m_rows <= 8 and D a multiple of 32: the weights packed
# into A (refcomp_bf16_pack_weights), then C[m, D] (fp32, from zero) = A[m, K] V[K, D], V in pairs
# along K (a bfloat16 value page, ldv apart), 32 columns per call of the tile.  Only the m_rows
# rows of A and C are touched, and row m of C depends only on row m of S.  Needs
# BF16GEMM_AVX512BF16_8X32 before it.
BF16_VALUES_AVX512BF16 = BF16_PACK_WEIGHTS + r"""
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline void refcomp_bf16values_avx512bf16(
    const float* S, int64_t s_rs, int64_t count, int64_t off, uint16_t* A, int64_t a_rs,
    const uint16_t* V, int64_t ldv, float* C, int64_t ldc, int64_t D, int64_t K, int64_t m_rows) {
  refcomp_bf16_pack_weights(S, s_rs, count, off, A, a_rs, K, m_rows);
  for (int64_t r = 0; r < m_rows; ++r)
    for (int64_t n = 0; n < D; n += 16) _mm512_storeu_ps(C + r * ldc + n, _mm512_setzero_ps());
  for (int64_t n = 0; n < D; n += 32)
    refcomp_bf16gemm_avx512bf16_8x32(A, a_rs, 1, V + n * 2, ldv, C + n, ldc, K, m_rows);
}
"""
