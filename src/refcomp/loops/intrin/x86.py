"""The x86 tensor intrinsics refcomp ships: fp32, bf16 and int8 matmul tiles (AVX2, AVX-512, AMX).

Name scheme: x86.<isa>.<what>_<MR>x<NR>.  Each registers at import; `refcomp.loops.intrin.get`
imports this module on first use.
"""
from __future__ import annotations

from ...ast import Evaluate, PrimFunc, StringImm
from . import cpu
from .kernels_amx import BF16GEMM_AMX_32X32, I8GEMM_AMX_32X32
from .kernels_bf16 import BF16GEMM_AVX512BF16_8X32
from .kernels_fp32 import (
    BF16GEMM_AVX2_6X16, SGEMM_AVX2_6X16, SGEMM_AVX2_8X8, SGEMM_AVX512_8X32, SGEMM_AVX512_12X32, SGEMM_AVX512_14X32,
    SGEMM_AVX512_6X64, SGEMM_AVX512_6X64_UNROLLED,
)
from .kernels_int8 import I8GEMM_AVX2_6X16, I8GEMM_VNNI_8X32
from .matmul_tile import matmul_tile
from .registry import TensorIntrin, register

# name: (MR, NR, A, B, acc, B layout, k multiple, C function, C source, features, A col stride, attrs)
_TILES = {
    "x86.avx2.sgemm_6x16": (6, 16, "float32", "float32", "float32", "rows", 1,
                            "refcomp_sgemm_avx2_6x16", SGEMM_AVX2_6X16, cpu.AVX2, True, {}),
    "x86.avx2.sgemm_8x8": (8, 8, "float32", "float32", "float32", "rows", 1,
                           "refcomp_sgemm_avx2_8x8", SGEMM_AVX2_8X8, cpu.AVX2, True, {}),
    "x86.avx2.sgemm_6x16_panel": (6, 16, "float32", "float32", "float32", "rows", 1,
                                  "refcomp_sgemm_avx2_6x16", SGEMM_AVX2_6X16, cpu.AVX2, True, {"a_panel": True}),
    "x86.avx512.sgemm_8x32": (8, 32, "float32", "float32", "float32", "rows", 1,
                              "refcomp_sgemm_avx512_8x32", SGEMM_AVX512_8X32, cpu.AVX512, True, {}),
    "x86.avx512.sgemm_12x32": (12, 32, "float32", "float32", "float32", "rows", 1,
                               "refcomp_sgemm_avx512_12x32", SGEMM_AVX512_12X32, cpu.AVX512, True, {}),
    "x86.avx512.sgemm_14x32": (14, 32, "float32", "float32", "float32", "rows", 1,
                               "refcomp_sgemm_avx512_14x32", SGEMM_AVX512_14X32, cpu.AVX512, True, {}),
    "x86.avx512.sgemm_6x64": (6, 64, "float32", "float32", "float32", "rows", 1,
                              "refcomp_sgemm_avx512_6x64", SGEMM_AVX512_6X64, cpu.AVX512, True, {}),
    "x86.avx512.sgemm_12x32_panel": (12, 32, "float32", "float32", "float32", "rows", 1,
                                     "refcomp_sgemm_avx512_12x32", SGEMM_AVX512_12X32, cpu.AVX512, True,
                                     {"a_panel": True}),
    "x86.avx512.sgemm_14x32_panel": (14, 32, "float32", "float32", "float32", "rows", 1,
                                     "refcomp_sgemm_avx512_14x32", SGEMM_AVX512_14X32, cpu.AVX512, True,
                                     {"a_panel": True}),
    "x86.avx512.sgemm_6x64_panel": (6, 64, "float32", "float32", "float32", "rows", 1,
                                    "refcomp_sgemm_avx512_6x64", SGEMM_AVX512_6X64, cpu.AVX512, True,
                                    {"a_panel": True}),
    "x86.avx2.bf16gemm_6x16": (6, 16, "bfloat16", "bfloat16", "float32", "rows", 1,
                               "refcomp_bf16gemm_avx2_6x16", BF16GEMM_AVX2_6X16, cpu.AVX2, True, {}),
    "x86.avx512bf16.bf16gemm_8x32": (8, 32, "bfloat16", "bfloat16", "float32", "pairs", 2,
                                     "refcomp_bf16gemm_avx512bf16_8x32", BF16GEMM_AVX512BF16_8X32,
                                     cpu.AVX512_BF16, True, {}),
    "x86.avx2.i8gemm_6x16": (6, 16, "int8", "int8", "int32", "pairs", 2,
                             "refcomp_i8gemm_avx2_6x16", I8GEMM_AVX2_6X16, ("avx2",), True, {}),
    "x86.vnni.i8gemm_8x32": (8, 32, "int8", "int8", "int32", "quads", 4,
                             "refcomp_i8gemm_vnni_8x32", I8GEMM_VNNI_8X32, cpu.AVX512_VNNI, True, {}),
    "x86.amx.bf16gemm_32x32": (32, 32, "bfloat16", "bfloat16", "float32", "pairs", 32,
                               "refcomp_bf16gemm_amx_32x32", BF16GEMM_AMX_32X32, cpu.AMX_BF16, False,
                               {"needs_amx": True}),
    "x86.amx.i8gemm_32x32": (32, 32, "int8", "int8", "int32", "quads", 64,
                             "refcomp_i8gemm_amx_32x32", I8GEMM_AMX_32X32, cpu.AMX_INT8, False,
                             {"needs_amx": True}),
}

# The stream form of each fp32 tile (kernels_fp32.sgemm_tile_source): the same tile, also naming the
# next panel of B in memory to the cache as it runs; the matmul recipe takes it for a B packed
# before the call (a constant weight), which streams from L3 or memory on every call.  The name
# puts "_stream" before a panel form's "_panel" (x86.avx512.sgemm_12x32_stream_panel), so a panel
# form's name still ends in "_panel".
STREAM_SUFFIX = "_stream"
_PANEL = "_panel"


def stream_form(name: str) -> str | None:
    """The name of the stream form of a registered fp32 tile intrinsic, None where it has none."""
    if name.endswith(STREAM_SUFFIX) or name.endswith(STREAM_SUFFIX + _PANEL):
        return None
    base, panel = (name[:-len(_PANEL)], _PANEL) if name.endswith(_PANEL) else (name, "")
    stream = base + STREAM_SUFFIX + panel
    return stream if stream in _TILES else None


def plain_form(name: str) -> str:
    """The tile a stream form (or any tile) computes with: `name` without its "_stream"."""
    return name.replace(STREAM_SUFFIX + _PANEL, _PANEL).removesuffix(STREAM_SUFFIX)


_TILES.update({(name[:-len(_PANEL)] + STREAM_SUFFIX + _PANEL if name.endswith(_PANEL) else name + STREAM_SUFFIX):
               entry[:7] + (entry[7] + STREAM_SUFFIX,) + entry[8:]
               for name, entry in list(_TILES.items()) if entry[7].startswith("refcomp_sgemm_")})

# The unrolled form of a tile (kernels_fp32.SGEMM_AVX512_6X64_UNROLLED): the same tile, its k loop
# four k a step with no software prefetch of B (the packed panel is one sequential stream the
# hardware prefetchers follow).  Only where it measured faster: the AVX-512 6 x 64 tile (the 12 x
# 32 and 14 x 32 ones ran 1-4% slower unrolled).  It has no stream form.  TensorizeTiling offers it
# as a decision of its own (tile_intrinsics leaves it out of the intrinsic decision).
UNROLLED_SUFFIX = "_unrolled"
_UNROLLED = {
    "x86.avx512.sgemm_6x64_unrolled": (6, 64, "float32", "float32", "float32", "rows", 1,
                                       "refcomp_sgemm_avx512_6x64_unrolled", SGEMM_AVX512_6X64_UNROLLED,
                                       cpu.AVX512, True, {}),
    "x86.avx512.sgemm_6x64_unrolled_panel": (6, 64, "float32", "float32", "float32", "rows", 1,
                                             "refcomp_sgemm_avx512_6x64_unrolled", SGEMM_AVX512_6X64_UNROLLED,
                                             cpu.AVX512, True, {"a_panel": True}),
}
_TILES.update(_UNROLLED)


def unrolled_form(name: str) -> str | None:
    """The name of the unrolled form of a registered fp32 tile intrinsic (a panel form's keeps its
    "_panel" last), None where it has none."""
    base, panel = (name[:-len(_PANEL)], _PANEL) if name.endswith(_PANEL) else (name, "")
    unrolled = base + UNROLLED_SUFFIX + panel
    return unrolled if unrolled in _UNROLLED else None


def is_unrolled(name: str) -> bool:
    """Whether `name` is the unrolled form of a tile (see unrolled_form)."""
    return name in _UNROLLED


def _init_form(impl: PrimFunc, c_function: str) -> PrimFunc:
    """impl calling `<c_function>_init` (C = A * B, C not read) instead of `c_function`: the init
    form the fp32 template writes for each tile (kernels_fp32.sgemm_tile_source)."""
    call = impl.body.value
    args = (StringImm(c_function + "_init"),) + call.args[1:]
    return impl.with_(body=Evaluate(call.with_(args=args)), name=c_function + "_init")


for _name, (_mr, _nr, _a, _b, _acc, _layout, _kmul, _fn, _src, _features, _acs, _attrs) in _TILES.items():
    _panel = _attrs.get("a_panel", False)
    _desc, _impl = matmul_tile(_mr, _nr, a_dtype=_a, b_dtype=_b, acc_dtype=_acc, b_layout=_layout,
                               k_multiple=_kmul, c_function=_fn, a_col_stride=_acs,
                               partial_rows=not _attrs.get("needs_amx", False), a_panel=_panel)
    register(TensorIntrin(
        _name, _desc, _impl, c_helpers=(_src,), c_includes=("immintrin.h", "stdint.h", "string.h"),
        cpu_features=tuple(_features), func_attrs={k: v for k, v in _attrs.items() if k != "a_panel"},
        doc=f"C[{_mr},{_nr}] ({_acc}) += A[{_mr},K] ({_a}{', packed MR-row panels' if _panel else ''}) * B[K,{_nr}] ({_b}, {_layout}), K % {_kmul} == 0",
        init_impl=_init_form(_impl, _fn) if _fn.startswith("refcomp_sgemm_") else None,
        operand_access=("read", "read", "readwrite"),  # A and B panels read, C tile updated
    ), override=True)


def tile_shape(name: str) -> tuple[int, int, int]:
    """(MR, NR, k multiple) of a built-in matmul tile intrinsic."""
    mr, nr, *_rest = _TILES[name]
    return mr, nr, _TILES[name][6]


def b_layout(name: str) -> str:
    """How a built-in tile intrinsic wants B stored: 'rows', 'pairs' or 'quads'."""
    return _TILES[name][5]
