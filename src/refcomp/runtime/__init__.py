"""Loading and calling compiled kernels: Library (cffi), argument checks."""
from .library import Library

__all__ = ["Library"]
