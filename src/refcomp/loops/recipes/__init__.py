"""Schedule recipes: ordinary refcomp schedules for the kernels people care about.

    from refcomp.loops import recipes
    sch = recipes.matmul_fp32(func)          # a Schedule; build sch.func
"""
from .conv import ConvShape, conv_fp32, conv_shape, find_conv, find_convs, row_lanes
from .conv_match import BlockedConvShape, blocked_conv_shape, find_blocked_convs
from .conv_tiles import conv_blocked_fp32
from .epilogue import matmul_bias_gelu
from .matmul import Tiling, matmul_bf16, matmul_fp32, matmul_int8, tiled_matmul

__all__ = ["BlockedConvShape", "ConvShape", "blocked_conv_shape", "conv_blocked_fp32", "find_blocked_convs", "Tiling", "conv_fp32", "conv_shape", "find_conv", "find_convs", "matmul_bf16", "matmul_bias_gelu", "matmul_fp32", "matmul_int8", "row_lanes", "tiled_matmul"]
