"""C micro-kernels for fp32 matmul tiles (AVX2/FMA 6x16 and 8x8; AVX-512 8x32, 12x32, 14x32 and 6x64),
all written by one template, `sgemm_tile_source`; and the AVX2 bf16 6x16 tile.

Each kernel computes C[0:m, 0:NR] += A[0:m, 0:K] * B[0:K, 0:NR], m = min(m_rows, MR), with
  A[r, k] at A + r*a_rs + k*a_cs   (any strides: row-major, or packed MR-row panels a_rs=1, a_cs=MR)
  B[k, j] at B + k*ldb + j         (unit stride along j: vector loads)
  C[r, j] at C + r*ldc + j
The accumulators live in registers for the whole K loop; C is read once and written once.
A partial tile (m_rows < MR, the last rows of a matrix whose height MR does not divide) touches
only its m_rows rows, with the tile's code for that row count.
The `target` attribute lets the helper compile whatever -march the library is built with; the
tensorize registry only offers a kernel when the CPU running refcomp has its features.
"""

# The vector ISAs of the template: C vector type, intrinsic prefix, gcc target, lanes, and the
# broadcast of one float of A (AVX2 broadcasts from memory; AVX-512's set1 of a loaded float
# compiles to the same vbroadcastss from memory).
_ISAS = {
    "avx2": ("__m256", "_mm256", "avx2,fma", 8, "_mm256_broadcast_ss(a + {r} * a_rs)"),
    "avx512": ("__m512", "_mm512", "avx512f", 16, "_mm512_set1_ps(a[{r} * a_rs])"),
}


def sgemm_tile_source(isa: str, rows: int, vectors: int, prefetch: int = 16, unroll: int = 1,
                      suffix: str = "", c_early: bool = False) -> str:
    """C source of the fp32 tile kernel `refcomp_sgemm_<isa>_<rows>x<NR>` (NR = vectors * lanes)
    and of its init form `..._init`, which writes C = A * B without reading C (the tile's
    zeroing folded into the kernel: its accumulators start at zero; see spec/tensorize.md).

    One function per row count 1..rows (every accumulator a named local, so gcc keeps them in
    registers; the last, partial tile of M keeps its accumulators in registers too), and the
    entry points that pick one by m_rows.  Per k: `vectors` loads of B, one broadcast of A per
    row and rows * vectors FMAs; the B lines `prefetch` k ahead are prefetched (the KC x NR panel
    streams from L2; 0: none).  rows * vectors accumulators + vectors + 1 registers must fit the
    ISA's 16 (AVX2) or 32 (AVX-512) vector registers.

    With c_early the tile names its C lines to the cache (prefetch for writing) before the K
    loop, and the accumulating form starts its accumulators at zero too and adds C to them after
    the loop: the C lines, which miss the cache when the loops sweep C once per k slab, arrive
    while the tile computes instead of stalling its first FMAs or its stores (C + sum of the
    slab's products: the same sum, added in another order).

    The stream forms `..._stream` and `..._stream_init` compute the same and also prefetch, into
    L2, the next panel of B in memory (the K x NR floats from B + K * ldb on: the packed panel
    the tile loop takes next, see refcomp.loops.recipes.matmul), its lines spread over the calls
    on this panel (as many as ran on the previous one), each call continuing where the thread's
    previous call on the same panel left off.  A
    pre-packed weight streams from L3 or memory on every call: without the hint the first tile
    of each panel waits for it while the next ones find it in L2; with it, memory delivers the
    next panel while the row tiles of this one compute.  The hint is an address only (computed
    as an integer, never dereferenced), so the last panel's, past the end of B, is harmless.

    With `unroll` > 1 the compiler is asked to unroll the k loop `unroll` times, and the functions
    are named `refcomp_sgemm_<isa>_<rows>x<NR><suffix>...`: the AVX-512 6 x 64
    tile's unrolled form (SGEMM_AVX512_6X64_UNROLLED below).
    """
    vtype, p, target, lanes, broadcast = _ISAS[isa]
    if rows * vectors + vectors + 1 > (32 if isa == "avx512" else 16):
        raise ValueError(f"sgemm_tile_source: a {rows} x {vectors * lanes} {isa} tile needs "
                         f"{rows * vectors + vectors + 1} vector registers")
    name = f"refcomp_sgemm_{isa}_{rows}x{vectors * lanes}{suffix}"
    params = ("const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb, "
              "float* restrict C, int64_t ldc, int64_t K")
    attribute = f'__attribute__((target("{target}"))) static inline void'
    lines = ["#include <immintrin.h>", "#include <stdint.h>"]
    for m in range(1, rows + 1):
        accumulators = [(r, v) for r in range(m) for v in range(vectors)]
        lines.append(f"{attribute} {name}_m{m}({params}, int accumulate, int stream) {{")
        lines.append(f"  {vtype} " + ", ".join(f"c{r}_{v}" for r, v in accumulators) + ";")
        if c_early:
            lines += [f"  __builtin_prefetch(C + {r} * ldc + {column}, 1, 3);"
                      for r in range(m) for column in sorted({*range(0, vectors * lanes, 16), vectors * lanes - 1})]
            lines += [f"  c{r}_{v} = {p}_setzero_ps();" for r, v in accumulators]
        else:
            lines.append("  if (accumulate) {")
            lines += [f"    c{r}_{v} = {p}_loadu_ps(C + {r} * ldc + {v * lanes});" for r, v in accumulators]
            lines.append("  } else {")
            lines += [f"    c{r}_{v} = {p}_setzero_ps();" for r, v in accumulators]
            lines.append("  }")
        lines += _STREAM_START
        if unroll > 1:
            # the compiler's own unrolling: steps written out by hand came out interleaved, with
            # a spill and 4% slower (188.5 against 195.8 GFLOP/s for the 6 x 64 tile alone)
            lines += ["#if defined(__clang__)", f"#pragma clang loop unroll_count({unroll})",
                      "#elif defined(__GNUC__)", f"#pragma GCC unroll {unroll}", "#endif"]
        lines.append("  for (int64_t k = 0; k < K; ++k) {")
        lines.append("    if (k == rc_pf_k && rc_pf < rc_pf_end) { "
                     "__builtin_prefetch(rc_next + rc_pf * 64, 0, 2); ++rc_pf; rc_pf_k += rc_pf_step; }")
        lines.append("    const float* b = B + k * ldb;")
        lines.append("    const float* a = A + k * a_cs;")
        if prefetch:
            lines += [f"    _mm_prefetch((const char*)(b + {prefetch} * ldb + {line}), _MM_HINT_T0);"
                      for line in range(0, vectors * lanes, 16)]
        lines += [f"    {vtype} b{v} = {p}_loadu_ps(b + {v * lanes});" for v in range(vectors)]
        for r in range(m):
            fmas = " ".join(f"c{r}_{v} = {p}_fmadd_ps(ar, b{v}, c{r}_{v});" for v in range(vectors))
            lines.append(f"    {{ {vtype} ar = {broadcast.format(r=r)}; {fmas} }}")
        lines.append("  }")
        if c_early:
            lines.append("  if (accumulate) {")
            lines += [f"    c{r}_{v} = {p}_add_ps(c{r}_{v}, {p}_loadu_ps(C + {r} * ldc + {v * lanes}));"
                      for r, v in accumulators]
            lines.append("  }")
        lines += [f"  {p}_storeu_ps(C + {r} * ldc + {v * lanes}, c{r}_{v});" for r, v in accumulators]
        lines.append("}")
    for entry, accumulate, stream in ((name, 1, 0), (name + "_init", 0, 0), (name + "_stream", 1, 1),
                                      (name + "_stream_init", 0, 1)):
        lines.append(f"{attribute} {entry}({params}, int64_t m_rows) {{")
        lines.append(f"  switch (m_rows >= {rows} ? {rows} : m_rows) {{")
        lines += [f"    case {m}: {name}_m{m}(A, a_rs, a_cs, B, ldb, C, ldc, K, {accumulate}, {stream}); break;"
                  for m in range(1, rows + 1)]
        lines += ["    default: break;", "  }", "}"]
    lines.append("")
    return "\n".join(lines)


# The stream forms spread the lines of the next panel evenly over the calls on this one: as many
# calls as ran on the previous panel (the row tiles of the block), a line every K / share k, so
# the next panel is complete when the last row tile of this one ends and its early lines are not
# named long before they are used; before a panel has been seen, K / STREAM_K_STEPS lines a call.
# 256 x 1024 x 4096 with a pre-packed weight (22 row tiles a panel), one thread of an AVX-512
# Xeon, A/B in one process: 14.55 -> 13.90 ms with K / 8 lines a call (K / 4: 14.06); the next
# panel named in bursts of lines before each tile instead: no gain (13.99 -> 13.96), as a burst
# holds the line fill buffers the tile's own loads need.
STREAM_K_STEPS = 8

# The stream form's state at the start of a tile call: the lines rc_pf .. rc_pf_end (numbered from
# rc_next, the next panel) this call names, one every rc_pf_step k from k = 0; per thread: the
# panel of the last call, the next line to name, the calls on that panel and on the one before.
_STREAM_START = [
    "  const char* rc_next = (const char*)((uintptr_t)B + (uintptr_t)(K * ldb) * sizeof(float));",
    "  int64_t rc_pf = 0, rc_pf_end = 0, rc_pf_k = 0, rc_pf_step = 1;",
    "#if defined(__GNUC__)",
    "  if (stream && K > 0) {",
    "    static __thread const float* rc_stream_panel;",
    "    static __thread int64_t rc_stream_line, rc_stream_calls, rc_stream_before;",
    "    if (rc_stream_panel != B) {",
    "      rc_stream_panel = B; rc_stream_line = 0;",
    "      if (rc_stream_calls > 0) rc_stream_before = rc_stream_calls;",
    "      rc_stream_calls = 0;",
    "    }",
    "    const int64_t rc_lines = (K * ldb * (int64_t)sizeof(float) + 63) / 64;",
    f"    int64_t rc_share = rc_stream_before > 0 ? (rc_lines + rc_stream_before - 1) / rc_stream_before : K / {STREAM_K_STEPS};",
    "    if (rc_share > K) rc_share = K;",
    "    if (rc_share < 1) rc_share = 1;",
    "    rc_pf = rc_stream_line; rc_pf_end = rc_pf + rc_share;",
    "    if (rc_pf_end > rc_lines) rc_pf_end = rc_lines;",
    "    rc_pf_step = K / rc_share;",
    "    rc_stream_line = rc_pf_end;",
    "    ++rc_stream_calls;",
    "  }",
    "#else",
    "  (void)stream;",
    "#endif",
]


# AVX2 6 x 16: 12 accumulators of 16 registers.  The next line of B is prefetched 16 k ahead:
# with KC = 1024 the 64 KiB panel streams from L2 (one core of an AVX-512 Xeon running this
# tile: 89.6 -> 93.4 GFLOP/s at N = 1024).  C named early (c_early): the matmul recipe's AVX2
# order sweeps C once per k slab (recipes.matmul.AVX2_TILE); in the general order, one thread,
# CPU time, A/B in one process, N = 1024 95.1 -> 98.7, 101.4 -> 104.1 and 102.1 -> 105.2 GFLOP/s,
# N = 512 101.2 -> 104.5, N = 2048 within noise.
SGEMM_AVX2_6X16 = sgemm_tile_source("avx2", 6, 2, c_early=True)
# AVX2 8 x 8, for N that 16 does not divide but 8 does (a convolution's output width of 56 or
# 24): eight one-vector accumulators, one load of B and eight broadcasts of A per k.
SGEMM_AVX2_8X8 = sgemm_tile_source("avx2", 8, 1)
SGEMM_AVX512_8X32 = sgemm_tile_source("avx512", 8, 2)
# AVX-512 12 x 32: 24 accumulators (of 32 zmm registers), two loads of B and twelve broadcasts
# of A per k, so each B vector feeds twelve FMAs instead of eight (the 8 x 32 tile's).  With
# B's KC x 32 panel streaming from L2 (KC up to 1024: 128 KiB, past a 48 KiB L1), one core
# ran 170 GFLOP/s with 8 rows and 180 with 12 (its FMA ceiling in L1 here is about 180).
SGEMM_AVX512_12X32 = sgemm_tile_source("avx512", 12, 2)
# AVX-512 14 x 32: 28 accumulators, two B vectors and the broadcast: 31 of 32 registers.  With
# its operands in L1 (K = 128, one core of a Xeon with AVX-512) 196 GFLOP/s against the 12 x 32
# tile's 185; in the matmul recipe at N = 1024, where B's panel streams from L2, the two were
# within noise of each other (155-156 GFLOP/s, alternating runs in one process).
SGEMM_AVX512_14X32 = sgemm_tile_source("avx512", 14, 2)
# AVX-512 6 x 64: 24 accumulators, four B vectors and the broadcast: 29 of 32 registers.  Per k
# four loads of B and six broadcasts of A feed 24 FMAs (the 12 x 32 tile: two and twelve), and a
# tile reads six rows of A in place instead of twelve, which, at a row stride of 4 KiB, all fall
# in one L1 set.  In the matmul recipe at N = 1024 (one core of an AVX-512 Xeon, one thread, CPU
# time, alternating in one process, best of 30): 167.7 GFLOP/s against 161.9 for the 12 x 32
# tile and 148.4 for OpenBLAS.  Offered to the tuner (refcomp.tune.TensorizeTiling) for N a
# multiple of 64; the matmul recipe takes it where it measured faster (recipes.matmul.WIDE_TILE).
SGEMM_AVX512_6X64 = sgemm_tile_source("avx512", 6, 4)
# Its unrolled form (x86.avx512.sgemm_6x64_unrolled): the k loop four k a step, no software
# prefetch of B.  The packed KC x 64 panel of B is one sequential stream from L2, which the hardware
# prefetchers follow; without the four prefetch instructions a k and the loop's own overhead the
# tile keeps the FMA ports busier.  The tile alone (K = 1024, its panel in L2, one core of an
# AVX-512 Xeon, CPU time): 184 GFLOP/s with the prefetches, unrolled or not; 184 without them one
# k a step; 196 without them unrolled by two or four (peak 215).  In the tuner's 1024 matmul
# structure (MC 48, NC 256, KC 1024, one thread, alternating in one process): 165.5 -> 173.8
# GFLOP/s (N = 512: 161.6 -> 167.0; 2048: 161.1 -> 169.7); unrolled by eight 169.1, unrolled by four
# with the prefetches 165.2.
SGEMM_AVX512_6X64_UNROLLED = sgemm_tile_source("avx512", 6, 4, prefetch=0, unroll=4, suffix="_unrolled")

# bf16 inputs, fp32 accumulation, on AVX2: a bf16 is the top half of an fp32, so widening is a
# zero-extend and a 16-bit shift (exact).  B is plain row-major bf16 (no packing needed).
BF16GEMM_AVX2_6X16 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* one bf16 as fp32 in every lane: broadcast the 16 bits (vpbroadcastw), move them up a half */
__attribute__((target("avx2"))) static inline __m256 rc_bf16_bcast(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_set1_epi16((short)*p), 16));
}
__attribute__((target("avx2,fma"))) static inline void refcomp_bf16gemm_avx2_6x16(
    const uint16_t* restrict A, int64_t a_rs, int64_t a_cs, const uint16_t* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 6) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m256 t0 = _mm256_loadu_ps(C + r * ldc), t1 = _mm256_loadu_ps(C + r * ldc + 8);
      for (int64_t k = 0; k < K; ++k) {
        __m256i braw = _mm256_loadu_si256((const __m256i*)(B + k * ldb));
        __m256 ar = rc_bf16_bcast(A + r * a_rs + k * a_cs);
        t0 = _mm256_fmadd_ps(ar, _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm256_castsi256_si128(braw)), 16)), t0);
        t1 = _mm256_fmadd_ps(ar, _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm256_extracti128_si256(braw, 1)), 16)), t1);
      }
      _mm256_storeu_ps(C + r * ldc, t0); _mm256_storeu_ps(C + r * ldc + 8, t1);
    }
    return;
  }
#define RC_LOADC(r) __m256 c##r##0 = _mm256_loadu_ps(C + (r) * ldc); \
                    __m256 c##r##1 = _mm256_loadu_ps(C + (r) * ldc + 8);
  RC_ROWS6(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; ++k) {
    const uint16_t* b = B + k * ldb;
    const uint16_t* a = A + k * a_cs;
    __m256i braw = _mm256_loadu_si256((const __m256i*)b);
    __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm256_castsi256_si128(braw)), 16));
    __m256 b1 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(braw, 1)), 16));
#define RC_FMA(r) { __m256 ar = rc_bf16_bcast(a + (r) * a_rs); \
                    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0); \
                    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1); }
    RC_ROWS6(RC_FMA)
#undef RC_FMA
  }
#define RC_STOREC(r) _mm256_storeu_ps(C + (r) * ldc, c##r##0); \
                     _mm256_storeu_ps(C + (r) * ldc + 8, c##r##1);
  RC_ROWS6(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS6
"""
