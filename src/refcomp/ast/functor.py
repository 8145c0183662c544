"""Generic traversal of the IR: a visitor, a sharing-preserving mutator, substitution, free vars.

Both walk the dataclass fields of each node, so a new node class needs no change here unless it
binds variables (listed in `BINDERS`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

from .buffer import Buffer
from .expr import Let, PrimExpr, Var
from .node import Node


def _children(value: Any) -> Iterable[Node]:
    if isinstance(value, Node):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _children(item)


class Visitor:
    """Pre-order walk; override `visit_<ClassName>` and call `self.generic_visit(node)` to descend."""

    def visit(self, node: Any) -> None:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        for field in dataclasses.fields(node):
            for child in _children(getattr(node, field.name)):
                self.visit(child)


class Mutator:
    """Rebuilds a tree bottom-up; returns the very same object when nothing below it changed.

    A Buffer that changes (say, a symbolic dim substituted) is rewritten once and the new buffer
    is used at every place the old one appeared, keeping buffer identity consistent.
    """

    def __init__(self) -> None:
        self.buffer_map: dict[Buffer, Buffer] = {}

    def visit(self, node: Any) -> Any:
        if isinstance(node, tuple):
            return self.visit_tuple(node)
        if not isinstance(node, Node):
            return node
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def visit_tuple(self, items: tuple) -> tuple:
        new = tuple(self.visit(item) for item in items)
        return items if all(a is b for a, b in zip(new, items)) else new

    def generic_visit(self, node: Node) -> Node:
        changes = {}
        for field in dataclasses.fields(node):
            old = getattr(node, field.name)
            if isinstance(old, (Node, tuple)):
                new = self.visit(old)
                if new is not old:
                    changes[field.name] = new
        return node.with_(**changes) if changes else node

    def visit_Buffer(self, buffer: Buffer) -> Buffer:
        if buffer in self.buffer_map:
            return self.buffer_map[buffer]
        new = self.generic_visit(buffer)
        self.buffer_map[buffer] = new
        return new


class _Substituter(Mutator):
    def __init__(self, lookup: Callable[[Var], Any]) -> None:
        super().__init__()
        self.lookup = lookup

    def visit_Var(self, var: Var) -> Any:
        replacement = self.lookup(var)
        return var if replacement is None else replacement

    visit_SizeVar = visit_Var


def substitute(node: Any, mapping: Mapping[Var, Any] | Callable[[Var], Any]) -> Any:
    """Replace variables by expressions everywhere in node (buffer shapes included).

    `mapping` is a dict from Var to expression (Python numbers allowed) or a function returning the
    replacement or None to keep the variable.
    """
    from .expr import convert

    if callable(mapping) and not isinstance(mapping, Mapping):
        lookup = mapping
    else:
        if not mapping:
            return node
        table = {var: convert(value) for var, value in mapping.items()}
        lookup = table.get
    return _Substituter(lookup).visit(node)


def post_order_visit(node: Any, function: Callable[[Node], None]) -> None:
    """Call function on every node below (and including) node, children first."""

    def walk(value: Any) -> None:
        for child in _children(value):
            for field in dataclasses.fields(child):
                walk(getattr(child, field.name))
            function(child)

    walk(node)


# Fields that bind a variable for the rest of the node: (class name, field name).
BINDERS = {("For", "loop_var"), ("LetStmt", "var"), ("Let", "var"), ("IterVar", "var")}


def free_vars(node: Any) -> list[Var]:
    """Variables used in node but not bound inside it, in first-use order."""
    bound: set[Var] = set()
    seen: dict[Var, None] = {}

    def walk(value: Any) -> None:
        for child in _children(value):
            if isinstance(child, Var):
                if child not in bound:
                    seen.setdefault(child, None)
                continue
            name = type(child).__name__
            for field in dataclasses.fields(child):
                item = getattr(child, field.name)
                if (name, field.name) in BINDERS:
                    bound.add(item)
                elif name == "Block" and field.name == "iter_vars":
                    for iv in item:
                        walk(iv.dom)
                        bound.add(iv.var)
                else:
                    walk(item)

    walk(node)
    return list(seen)


def uses_var(node: Any, var: Var) -> bool:
    found = False

    def check(n: Node) -> None:
        nonlocal found
        if n is var:
            found = True

    post_order_visit(node, check)
    return found


def collect(node: Any, kind: type) -> list:
    """Every node of the given class below node, in post-order, without duplicates."""
    out: dict[int, Any] = {}

    def take(n: Node) -> None:
        if isinstance(n, kind):
            out.setdefault(id(n), n)

    post_order_visit(node, take)
    return list(out.values())


def is_pure(expr: PrimExpr) -> bool:
    """True when expr has no side effects (no opaque calls)."""
    from .intrinsics import is_pure_call

    pure = True

    def check(n: Node) -> None:
        nonlocal pure
        if type(n).__name__ == "Call" and not is_pure_call(n.op):
            pure = False

    post_order_visit(expr, check)
    return pure
