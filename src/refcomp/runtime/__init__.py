"""Loading and calling compiled kernels: Library (cffi), argument checks; the graph VM on first use."""
from ..lazy import lazy_exports
from .library import Library

_LAZY = {name: ("refcomp.runtime.vm", name) for name in ("VirtualMachine", "Executable", "register_extern")}

__all__ = ["Library"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
