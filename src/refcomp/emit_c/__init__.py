"""The C backend: emitter (lowered IR -> C99), targets, gcc toolchain and build cache."""
from .codegen import CModule, CParam, EmitOptions, emit, size_vars_of
from .toolchain import CACHE_STATS, Target, compile_shared, parse_target

__all__ = ["CACHE_STATS", "CModule", "CParam", "EmitOptions", "Target", "compile_shared", "emit",
           "parse_target", "size_vars_of"]
