"""The CUDA backend: lowering hooks, the emitter on emit_c's C-family base, the nvcc toolchain."""
from .codegen import CudaModule, emit_cuda
from .prepare import CUDA_LOWERING, prepare
from .toolchain import compile_cuda, nvcc_flags

__all__ = ["CUDA_LOWERING", "CudaModule", "compile_cuda", "emit_cuda", "nvcc_flags", "prepare"]
