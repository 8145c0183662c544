"""Loading and calling compiled kernels: one loader base (LoadedKernel) for C and CUDA, argument checks."""
from .cuda_library import CudaLibrary
from .library import Library
from .loader import LoadedKernel

__all__ = ["CudaLibrary", "Library", "LoadedKernel"]


def __getattr__(name):
    """The graph VM (refcomp.runtime.vm), loaded on first use."""
    if name in ("VirtualMachine", "Executable", "register_extern"):
        from . import vm

        return getattr(vm, name)
    raise AttributeError(f"module 'refcomp.runtime' has no attribute {name!r}")
