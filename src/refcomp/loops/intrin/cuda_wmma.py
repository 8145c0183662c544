"""Tensor-core matmul tiles for the CUDA target, used through `Schedule.tensorize`.

`cuda.wmma.f16_f32_16x16` (and `cuda.wmma.bf16_f32_16x16`) computes one 16 x 16 float32 tile
C += A[16, K] * B[K, 16] from float16 (bfloat16) A and B (row-major, leading dimensions free, K a multiple of 16) with the warp matrix instructions
(`nvcuda::wmma`, mma.sync underneath): the accumulator fragment is loaded once, K / 16 mma steps
run on fragments, and it is stored once.

It is a *warp-collective* extern: all 32 threads of a warp call it with the same arguments and
together compute the tile once.  The CUDA backend puts barriers around it, and the CPU simulation
runs its IR meaning (`simulated_body`) once per block instead of once per thread.  A kernel using
it must be launched with exactly one warp per block along threadIdx.x (32 threads) and no other
thread axis.
"""
from __future__ import annotations

from ...ast import Buffer, BufferLoad, BufferStore, Call, For, IntImm, PrimExpr, Stmt, StringImm, Var
from .matmul_tile import matmul_tile
from .registry import TensorIntrin, register

_DEVICE_TEMPLATE = r"""
/* One 16x16 float32 tile C += A[16, K] * B[K, 16] on tensor cores from ELEMENT operands
   (warp-collective: every lane of the warp calls it with the same arguments). */
static __device__ void FUNCTION(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                                float* c, int64_t ldc, int64_t k_extent) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, ELEMENT, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, ELEMENT, nvcuda::wmma::row_major> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::load_matrix_sync(acc, c, (unsigned)ldc, nvcuda::wmma::mem_row_major);
    for (int64_t k = 0; k < k_extent; k += 16) {
        nvcuda::wmma::load_matrix_sync(fa, (const ELEMENT*)(a + k), (unsigned)lda);
        nvcuda::wmma::load_matrix_sync(fb, (const ELEMENT*)(b + k * ldb), (unsigned)ldb);
        nvcuda::wmma::mma_sync(acc, fa, fb, acc);
    }
    nvcuda::wmma::store_matrix_sync(c, acc, (unsigned)ldc, nvcuda::wmma::mem_row_major);
}
"""

# refcomp dtype -> (intrinsic name, device function, CUDA element type, header)
VARIANTS = {
    "float16": ("cuda.wmma.f16_f32_16x16", "cuda_wmma_f16_f32_16x16", "__half", "cuda_fp16.h"),
    "bfloat16": ("cuda.wmma.bf16_f32_16x16", "cuda_wmma_bf16_f32_16x16", "__nv_bfloat16", "cuda_bf16.h"),
}
NAME, FUNCTION = VARIANTS["float16"][:2]


def intrin_name(dtype: str) -> str:
    """The tensor-core intrinsic for float16 or bfloat16 operands."""
    try:
        return VARIANTS[dtype][0]
    except KeyError:
        raise ValueError(f"no tensor-core intrinsic for {dtype} operands; use float16 or bfloat16") from None


for _dtype, (_name, _function, _element, _header) in VARIANTS.items():
    _desc, _impl = matmul_tile(16, 16, a_dtype=_dtype, b_dtype=_dtype, acc_dtype="float32", b_layout="rows",
                               k_multiple=16, c_function=_function, a_col_stride=False)
    register(TensorIntrin(
        _name, _desc, _impl,
        c_helpers=(_DEVICE_TEMPLATE.replace("FUNCTION", _function).replace("ELEMENT", _element),),
        c_includes=("mma.h", _header), func_attrs={"cuda_only": True},
        cpu_features=("cuda-device",),  # never on a CPU: names(available_only=True) leaves it out
        doc=f"16x16 float32 tile from {_dtype} operands on tensor cores (wmma), warp-collective",
        operand_access=("read", "read", "readwrite"),  # A and B tiles read, C loaded, updated, stored
    ))


def _flat(address: PrimExpr) -> tuple[Buffer, PrimExpr]:
    if not (isinstance(address, Call) and address.op == "address_of" and isinstance(address.args[0], BufferLoad)):
        raise ValueError("tensor-core tile: expected address_of(buffer[index]) arguments")
    load = address.args[0]
    return load.buffer, load.indices[0]


def simulated_body(call: Call) -> Stmt:
    """The IR meaning of one call: the tile product, for the CPU simulation (flat buffers)."""
    _, a_addr, lda, b_addr, ldb, c_addr, ldc, k_extent = call.args
    a, a0 = _flat(a_addr)
    b, b0 = _flat(b_addr)
    c, c0 = _flat(c_addr)
    i, j, k = Var("wi", "int64"), Var("wj", "int64"), Var("wk", "int64")
    wide = lambda e: e.astype("int64")  # noqa: E731
    c_index = wide(c0) + i * wide(ldc) + j
    update = BufferStore(
        c, BufferLoad(c, (c_index,)) + BufferLoad(a, (wide(a0) + i * wide(lda) + k,)).astype("float32")
        * BufferLoad(b, (wide(b0) + k * wide(ldb) + j,)).astype("float32"), (c_index,))
    nest: Stmt = For(k, IntImm(0, "int64"), wide(k_extent), "serial", update)
    nest = For(j, IntImm(0, "int64"), IntImm(16, "int64"), "serial", nest)
    return For(i, IntImm(0, "int64"), IntImm(16, "int64"), "serial", nest)


def is_warp_collective(call: PrimExpr) -> bool:
    return (isinstance(call, Call) and call.op == "call_extern" and bool(call.args)
            and isinstance(call.args[0], StringImm) and call.args[0].value in WARP_COLLECTIVE)


WARP_COLLECTIVE = {function: simulated_body for _, function, _, _ in VARIANTS.values()}

__all__ = ["NAME", "VARIANTS", "WARP_COLLECTIVE", "intrin_name", "is_warp_collective", "simulated_body"]
