"""Checking the arguments of a compiled kernel before the call, and binding symbolic dims.

The checker is refcomp.shape.arguments, the one the interpreter uses too; a compiled kernel takes
raw pointers, so its Signature also checks layout, alignment and aliasing (raw_pointers=True).
"""
from __future__ import annotations

from ..shape.arguments import BoundCall, Signature, check_scalar, show, written_buffers

__all__ = ["BoundCall", "Signature", "check_scalar", "show", "written_buffers"]
