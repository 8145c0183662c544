"""Schedule recipes: ordinary refcomp schedules for the kernels people care about.

    from refcomp.loops import recipes
    sch = recipes.matmul_fp32(func)          # a Schedule; build sch.func
"""
from .matmul import Tiling, matmul_fp32, tiled_matmul

__all__ = ["Tiling", "matmul_fp32", "tiled_matmul"]
