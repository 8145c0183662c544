"""Tensor intrinsics: the registry and the x86 micro-kernels refcomp ships.

    from refcomp.loops import intrin
    intrin.register(intrin.TensorIntrin("my.tile", desc, impl, c_helpers=(source,)))
    sch.tensorize(loop, "my.tile")
"""
from .cpu import cpu_features, has
from .registry import TensorIntrin, get, names, register, unregister

__all__ = ["TensorIntrin", "cpu_features", "get", "has", "names", "register", "unregister"]
