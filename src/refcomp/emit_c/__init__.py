"""The C backend: the C-family emitter base, the C99/OpenMP emitter, gcc toolchain and build cache.

The names exported here are the public base another C-family backend (emit_cuda) builds on.
"""
from .codegen import (
    FIRST_ASSERT_CODE, CFamilyEmitter, CModule, CParam, EmitOptions, FailureScope, emit, size_vars_of,
)
from .codegen_expr import unit_ramp_base
from .ctype import storage_type, value_type
from .names import c_string, comment_safe, mangle, symbol_suffix
from .prelude import HEADER_INCLUDES, scalar_prelude
from .toolchain import CACHE_STATS, COptions, c_options, cache_dir, compile_shared

__all__ = ["CACHE_STATS", "CFamilyEmitter", "CModule", "COptions", "CParam", "EmitOptions",
           "FIRST_ASSERT_CODE", "FailureScope", "HEADER_INCLUDES", "c_options", "c_string", "cache_dir",
           "comment_safe", "compile_shared", "emit", "mangle", "scalar_prelude", "size_vars_of",
           "storage_type", "symbol_suffix", "unit_ramp_base", "value_type"]
