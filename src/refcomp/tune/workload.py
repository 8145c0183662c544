"""The identity of a tuning workload: a structural hash of its PrimFunc.

Two PrimFuncs that `refcomp.ast.structural_equal` calls equal (the same IR up to a consistent
renaming of vars and buffers, and whatever the function itself is called) get the same hash, so records measured for one apply to the other
and to the same function built on another machine.  Vars and buffers hash by the order in which
they first appear, never by name or identity.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from typing import Any

from ..ast import Buffer, PrimFunc, Var
from ..ast.node import Node


class _Hasher:
    def __init__(self) -> None:
        self.numbers: dict[int, int] = {}
        self.parts: list[str] = []

    def number(self, obj: Any) -> int:
        """The position of obj among the vars and buffers seen so far (new ones get the next)."""
        return self.numbers.setdefault(id(obj), len(self.numbers))

    def visit(self, value: Any) -> None:
        out = self.parts.append
        if isinstance(value, Var):
            known = id(value) in self.numbers
            out(f"V{self.number(value)}:{value.dtype}" if not known else f"V{self.number(value)}")
        elif isinstance(value, Buffer):
            if id(value) in self.numbers:
                out(f"B{self.numbers[id(value)]}")
                return
            out(f"B{self.number(value)}(")
            for field in dataclasses.fields(value):
                if field.name != "name":
                    out(field.name)
                    self.visit(getattr(value, field.name))
            out(")")
        elif isinstance(value, Node):
            out(type(value).__name__ + "(")
            for field in dataclasses.fields(value):
                if field.name == "name" and isinstance(value, PrimFunc):
                    continue  # a kernel's own name (fused_matmul1_relu, ...) is not its workload
                out(field.name)
                self.visit(getattr(value, field.name))
            out(")")
        elif isinstance(value, (tuple, list)):
            out(f"[{len(value)}")
            for item in value:
                self.visit(item)
            out("]")
        elif isinstance(value, Mapping):
            out(f"{{{len(value)}")
            for key, item in value.items():
                self.visit(key)
                self.visit(item)
            out("}")
        elif isinstance(value, float):
            out("nan" if math.isnan(value) else repr(value))
        else:
            out(f"{type(value).__name__}:{value!r}")


def structural_hash(func: PrimFunc) -> str:
    """A hex digest that is equal for structurally equal PrimFuncs (names of vars/buffers ignored)."""
    hasher = _Hasher()
    hasher.visit(func)
    return hashlib.sha256("\x1f".join(hasher.parts).encode()).hexdigest()[:32]
