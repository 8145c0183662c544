"""torch.export import: `from_exported_program(ep)` -> IRModule with a graph function `main`.

A program exported with `dynamic_shapes` keeps its dynamic dims as symbols; each becomes one
refcomp size var (its range recorded as the function's bounds), so one compiled model serves every
batch size and sequence length in range.  Each ATen op family's converters live in their own module
and register themselves in CONVERTERS; shape arithmetic on SymInts is read off the expressions torch
recorded (symbolic.py).  torch is an optional dependency: it is imported only when a program is.
"""
from .importer import CONVERTERS, TorchImportError, from_exported_program, supported_ops  # noqa: F401
from . import ops_create, ops_elementwise, ops_index, ops_nn, ops_reduce, ops_shape  # noqa: F401  (register)
