"""The CUDA backend: lowering hooks, the emitter on emit_c's C-family base, the nvcc toolchain.

`prepare.prepare(func)` is `lower(func, hooks=CUDA_LOWERING)`, the form both the emitter and the
CPU simulation (`simulate`) start from.
"""
from .codegen import CudaModule, emit_cuda
from .prepare import CUDA_LOWERING
from .toolchain import compile_cuda, nvcc_flags

__all__ = ["CUDA_LOWERING", "CudaModule", "compile_cuda", "emit_cuda", "nvcc_flags"]
