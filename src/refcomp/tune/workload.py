"""The identity of a tuning workload: a structural hash of its PrimFunc.

Two PrimFuncs that `refcomp.ast.structural_equal` calls equal (the same IR up to a consistent
renaming of vars and buffers, and whatever the function itself is called) get the same hash, so records measured for one apply to the other
and to the same function built on another machine.  Vars and buffers hash by the order in which
they first appear, never by name or identity.
"""
from __future__ import annotations

from ..ast import PrimFunc
from ..ast.structural import StructuralHasher


def structural_hash(func: PrimFunc) -> str:
    """A hex digest that is equal for structurally equal PrimFuncs (names of vars/buffers ignored)."""
    hasher = StructuralHasher()
    hasher.visit(func)
    return hasher.digest()
