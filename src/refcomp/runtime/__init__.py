"""Loading and calling compiled kernels: Library (cffi), argument checks."""
from .library import Library

__all__ = ["Library"]


def __getattr__(name):
    """The graph VM (refcomp.runtime.vm), loaded on first use."""
    if name in ("VirtualMachine", "Executable", "register_extern"):
        from . import vm

        return getattr(vm, name)
    raise AttributeError(f"module 'refcomp.runtime' has no attribute {name!r}")
