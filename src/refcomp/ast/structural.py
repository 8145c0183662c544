"""Structural equality of IR trees up to renaming of variables and buffers (alpha-equivalence)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from .buffer import Buffer
from .expr import Var
from .node import Node


class _Equal:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.forward: dict[int, Any] = {}
        self.backward: dict[int, Any] = {}
        self.path: list[str] = []

    def bind(self, a: Any, b: Any) -> bool:
        fa, fb = self.forward.get(id(a)), self.backward.get(id(b))
        if fa is None and fb is None:
            self.forward[id(a)] = b
            self.backward[id(b)] = a
            return True
        return fa is b and fb is a

    def equal(self, a: Any, b: Any) -> bool:
        if a is b:
            if isinstance(a, (Var, Buffer)):
                return self.bind(a, b) if id(a) in self.forward or id(b) in self.backward else True
            return True
        if type(a) is not type(b) and not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            return False  # (a dict and its frozen MappingProxyType copy hold the same IR)
        if isinstance(a, tuple):
            return len(a) == len(b) and all(self.equal(x, y) for x, y in zip(a, b))
        if isinstance(a, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, Mapping):
            if set(a) == set(b):
                return all(self.equal(a[k], b[k]) for k in a)
            # Keys that are IR nodes (buffers in lowering's attrs) are matched structurally, in order.
            return len(a) == len(b) and all(
                isinstance(ka, Node) and self.equal(ka, kb) and self.equal(va, vb)
                for (ka, va), (kb, vb) in zip(a.items(), b.items()))
        if isinstance(a, Var):
            return a.dtype == b.dtype and self.bind(a, b)
        if isinstance(a, Buffer):
            if id(a) in self.forward or id(b) in self.backward:
                return self.bind(a, b)
            if not self.fields_equal(a, b, skip=("name",)):
                return False
            return self.bind(a, b)
        if isinstance(a, Node):
            return self.fields_equal(a, b)
        return a == b

    def fields_equal(self, a: Node, b: Node, skip: tuple[str, ...] = ()) -> bool:
        for field in dataclasses.fields(a):
            if field.name in skip:
                continue
            if not self.equal(getattr(a, field.name), getattr(b, field.name)):
                self.path.append(f"{type(a).__name__}.{field.name}")
                return False
        return True


def structural_equal(a: Any, b: Any, map_free_vars: bool = True) -> bool:
    """True when a and b are the same IR up to a consistent renaming of vars and buffers.

    Names are not compared for vars and buffers (block names are).  With map_free_vars=False, a
    var that is not bound inside the trees must be the very same object on both sides.
    """
    return _checker(a, b, map_free_vars).equal(a, b)


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = True) -> None:
    """Raise AssertionError showing both trees when they differ."""
    checker = _checker(a, b, map_free_vars)
    if not checker.equal(a, b):
        where = " <- ".join(checker.path[:6])
        raise AssertionError(
            f"IR trees differ at {where or 'the root'}\n--- left\n{_show(a)}\n--- right\n{_show(b)}"
        )


def _checker(a: Any, b: Any, map_free_vars: bool) -> _Equal:
    checker = _Equal(map_free_vars)
    if not map_free_vars:
        from .functor import free_vars

        # Pin every free var to itself, so the other side must use that very var there.
        for var in free_vars(a) + free_vars(b):
            checker.forward[id(var)] = var
            checker.backward[id(var)] = var
    return checker


def _show(node: Any) -> str:
    try:
        return node.script()
    except Exception:
        return repr(node)
