"""Loading and calling compiled kernels: one loader base (LoadedKernel) for C and CUDA, argument checks;
the graph VM on first use."""
from ..lazy import lazy_exports
from .cuda_library import CudaLibrary
from .library import Library
from .loader import LoadedKernel

_LAZY = {name: ("refcomp.runtime.vm", name) for name in ("VirtualMachine", "Executable", "register_extern")}

__all__ = ["CudaLibrary", "Library", "LoadedKernel"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
