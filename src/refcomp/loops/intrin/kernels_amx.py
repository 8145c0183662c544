"""C micro-kernels on AMX tiles: a 32x32 C block held in four 16x16 accumulator tiles.

bf16:  C[32, 32] (fp32) += A[32, K] (bf16) * B[K, 32] (bf16), K a multiple of 32, with B packed
       in pairs, B[k, j] at B + (k/2)*ldb + j*2 + k%2 (the layout tdpbf16ps reads).
int8:  C[32, 32] (int32) += A[32, K] (int8) * B[K, 32] (int8), K a multiple of 64, B packed in
       quads, B[k, j] at B + (k/4)*ldb + j*4 + k%4; tdpbssd multiplies signed by signed, so no
       compensation is needed.
A rows are contiguous (a_cs == 1) and a_rs elements apart.  Every tile is 16 rows x 64 bytes.
The tile configuration is per thread; it is loaded on each call (it costs far less than the
32x32xK block) so kernels stay correct on any OpenMP thread.  The OS must have granted the
process AMX state (arch_prctl ARCH_REQ_XCOMP_PERM); the library does that once when the
function has the attribute `needs_amx`.
"""

from .kernels_bf16 import BF16_PACK_WEIGHTS

AMX_CONFIG = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
typedef struct { uint8_t palette_id; uint8_t start_row; uint8_t reserved[14];
                 uint16_t colsb[16]; uint8_t rows[16]; } refcomp_amx_tilecfg;
__attribute__((target("amx-tile"))) static inline void refcomp_amx_configure(void) {
  refcomp_amx_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
}
"""


def _gemm_tile_32x32(name: str, feature: str, in_type: str, out_type: str, elem_bytes: int,
                     k_step: int, dot: str) -> str:
    """The C source of a 32x32 AMX GEMM tile: C loaded into tiles 0-3, A rows in 4-5, B (packed
    in groups of k_step / 16 along k) in 6-7, `dot` accumulating, C stored back."""
    group = k_step // 16
    return AMX_CONFIG + f"""
__attribute__((target("amx-tile,{feature}"))) static inline void {name}(
    const {in_type}* A, int64_t a_rs, const {in_type}* B, int64_t ldb, {out_type}* C, int64_t ldc,
    int64_t K) {{
  refcomp_amx_configure();
  const int64_t c_stride = ldc * 4, a_stride = a_rs * {elem_bytes}, b_stride = ldb * {elem_bytes};
  _tile_loadd(0, C, c_stride);
  _tile_loadd(1, C + 16, c_stride);
  _tile_loadd(2, C + 16 * ldc, c_stride);
  _tile_loadd(3, C + 16 * ldc + 16, c_stride);
  for (int64_t k = 0; k < K; k += {k_step}) {{
    _tile_loadd(4, A + k, a_stride);
    _tile_loadd(5, A + 16 * a_rs + k, a_stride);
    _tile_loadd(6, B + (k / {group}) * ldb, b_stride);
    _tile_loadd(7, B + (k / {group}) * ldb + {16 * group}, b_stride);
    {dot}(0, 4, 6);
    {dot}(1, 4, 7);
    {dot}(2, 5, 6);
    {dot}(3, 5, 7);
  }}
  _tile_stored(0, C, c_stride);
  _tile_stored(1, C + 16, c_stride);
  _tile_stored(2, C + 16 * ldc, c_stride);
  _tile_stored(3, C + 16 * ldc + 16, c_stride);
}}
"""


BF16GEMM_AMX_32X32 = _gemm_tile_32x32("refcomp_bf16gemm_amx_32x32", "amx-bf16", "uint16_t", "float", 2, 32,
                                      "_tile_dpbf16ps")
I8GEMM_AMX_32X32 = _gemm_tile_32x32("refcomp_i8gemm_amx_32x32", "amx-int8", "int8_t", "int32_t", 1, 64,
                                    "_tile_dpbssd")


# Attention scores (refcomp.llm.attention): C[m, 32] (fp32) = A[m, K] (bf16) * B[K, 32] (bf16 pairs)
# for m = m_rows <= 32, K a multiple of 32.  Unlike the GEMM tile above, C starts from zero
# (tilezero: no load of C, whose memory the caller would otherwise have to clear with vector stores
# just before the tile load reads it back), and a call of at most 16 rows uses one row of tiles.
# Rows past m_rows in their 16-row tile are computed and stored too (A and C must have room).
_SCORES = r"""
__attribute__((target("amx-tile,amx-bf16"))) static inline void NAME(
    const uint16_t* A, int64_t a_rs, const uint16_t* B, int64_t ldb, float* C, int64_t ldc,
    int64_t K, int64_t m_rows) {
  CONFIGURE
  const int64_t c_stride = ldc * 4, a_stride = a_rs * 2, b_stride = ldb * 2;
  const int two = m_rows > 16;
  _tile_zero(0);
  _tile_zero(1);
  if (two) { _tile_zero(2); _tile_zero(3); }
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(6, B + (k / 2) * ldb, b_stride);
    _tile_loadd(7, B + (k / 2) * ldb + 32, b_stride);
    _tile_loadd(4, A + k, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (two) {
      _tile_loadd(5, A + 16 * a_rs + k, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, C, c_stride);
  _tile_stored(1, C + 16, c_stride);
  if (two) { _tile_stored(2, C + 16 * ldc, c_stride); _tile_stored(3, C + 16 * ldc + 16, c_stride); }
}
"""
BF16_SCORES_AMX_32X32 = AMX_CONFIG + _SCORES.replace("NAME", "refcomp_bf16scores_amx_32x32").replace(
    "CONFIGURE", "refcomp_amx_configure();")


# Attention's weights x values (refcomp.llm.attention, dot "amx_pv"): C[m, D] (fp32) = W[m, K] (bf16) *
# V[K, D] (bf16 pairs along K: V[k, n] at V + (k/2)*ldv + n*2 + k%2, a bfloat16 value page) for
# m = m_rows <= 32, K a multiple of 32, D a multiple of 16.  The weights come as float32 rows S
# packed into A by refcomp_bf16_pack_weights (kernels_bf16: rounded to bfloat16, zeros around the
# chunk) and are multiplied 16 rows x 16 columns per tile, C from zero.  Row m of C depends
# only on row m of S.  Rows past m_rows in their 16-row tile are computed from A's rows as they
# are and stored too (A and C must have room).  It and refcomp_bf16scores_amx_32x32_configured (the
# scores tile above) leave the tile configuration to their caller, who loads it once
# (refcomp_amx_configure) before a run of calls on one thread.
BF16_VALUES_AMX = AMX_CONFIG + _SCORES.replace("NAME", "refcomp_bf16scores_amx_32x32_configured").replace(
    "CONFIGURE", "") + BF16_PACK_WEIGHTS + r"""
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw"))) static inline void refcomp_bf16values_amx(
    const float* S, int64_t s_rs, int64_t count, int64_t off, uint16_t* A, int64_t a_rs,
    const uint16_t* V, int64_t ldv, float* C, int64_t ldc, int64_t D, int64_t K, int64_t m_rows) {
  refcomp_bf16_pack_weights(S, s_rs, count, off, A, a_rs, K, m_rows);
  const int64_t c_stride = ldc * 4, a_stride = a_rs * 2, v_stride = ldv * 2;
  const int two = m_rows > 16;
  for (int64_t n = 0; n < D; n += 16) {
    _tile_zero(0);
    if (two) _tile_zero(2);
    for (int64_t k = 0; k < K; k += 32) {
      _tile_loadd(6, V + (k / 2) * ldv + n * 2, v_stride);
      _tile_loadd(4, A + k, a_stride);
      _tile_dpbf16ps(0, 4, 6);
      if (two) {
        _tile_loadd(5, A + 16 * a_rs + k, a_stride);
        _tile_dpbf16ps(2, 5, 6);
      }
    }
    _tile_stored(0, C + n, c_stride);
    if (two) _tile_stored(2, C + 16 * ldc + n, c_stride);
  }
}
"""
