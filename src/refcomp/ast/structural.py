"""Structural equality of IR trees up to renaming of variables and buffers (alpha-equivalence),
and the structural hash of a tree (`StructuralHasher`): with names ignored it identifies a tuning
workload, with names kept it identifies a function exactly (the key of refcomp.build's cache).
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping

import numpy as np

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


class UnhashableIR(TypeError):
    """The tree holds a value whose text does not identify it exactly (StructuralHasher(exact=True))."""


_EXACT_LEAVES = (int, str, bytes, bool, complex, type(None), enum.Enum)


class StructuralHasher:
    """The parts of a structural hash of IR trees, appended to `parts` by `visit`.

    Vars and buffers are numbered in the order they first appear, never by identity, so two
    structurally equal trees give the same parts; `objects` lists them in that order.  With
    exact=False, names are left out (vars, buffers and the PrimFunc's own name): the identity of a
    tuning workload.  With exact=True names are kept, numpy arrays hash by dtype, shape and bytes,
    and a leaf whose repr might not identify it (an unknown type) raises UnhashableIR: equal parts
    then mean the trees are the same function, names included.
    """

    def __init__(self, exact: bool = False) -> None:
        self.exact = exact
        self.numbers: dict[int, int] = {}
        self.objects: list[Any] = []
        self.parts: list[str] = []

    def number(self, obj: Any) -> int:
        """The position of obj among the vars and buffers seen so far (new ones get the next)."""
        found = self.numbers.get(id(obj))
        if found is None:
            found = self.numbers[id(obj)] = len(self.objects)
            self.objects.append(obj)
        return found

    def visit(self, value: Any) -> None:
        from .function import PrimFunc

        out = self.parts.append
        if isinstance(value, Var):
            known = id(value) in self.numbers
            label = f"V{self.number(value)}:{value.dtype}" if not known else f"V{self.number(value)}"
            if self.exact and not known:
                label += f":{value.name!r}:{type(value).__name__}"
            out(label)
        elif isinstance(value, Buffer):
            if id(value) in self.numbers:
                out(f"B{self.numbers[id(value)]}")
                return
            out(f"B{self.number(value)}(")
            for field in dataclasses.fields(value):
                if field.name != "name" or self.exact:
                    out(field.name)
                    self.visit(getattr(value, field.name))
            out(")")
        elif isinstance(value, Node):
            out(type(value).__name__ + "(")
            for field in dataclasses.fields(value):
                if field.name == "name" and isinstance(value, PrimFunc) and not self.exact:
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
        elif not self.exact:
            out(f"{type(value).__name__}:{value!r}")
        elif isinstance(value, np.ndarray):
            out(f"ndarray:{value.dtype.str}:{value.shape}:{value.tobytes().hex()}")
        elif isinstance(value, np.generic):
            out(f"{type(value).__name__}:{value.tobytes().hex()}")
        elif isinstance(value, _EXACT_LEAVES) or dataclasses.is_dataclass(value) and _frozen_leaf(value):
            out(f"{type(value).__name__}:{value!r}")
        else:
            raise UnhashableIR(f"structural hash: a {type(value).__name__} in the IR has no exact text")

    def digest(self, length: int = 32) -> str:
        """The sha256 of the parts, in hex, cut to length characters."""
        import hashlib

        return hashlib.sha256("\x1f".join(self.parts).encode()).hexdigest()[:length]


def _frozen_leaf(value: Any) -> bool:
    """A frozen dataclass of exact leaves (DataType): its repr names every field."""
    params = getattr(type(value), "__dataclass_params__", None)
    return bool(params and params.frozen and params.repr and
                all(isinstance(getattr(value, f.name), _EXACT_LEAVES) for f in dataclasses.fields(value)))
