"""Tree surgery shared by the schedule primitives: paths to nodes, identity replacement, fresh names.

The IR is immutable, so "changing" a node means rebuilding the path from the root to it.  These
helpers walk statements only (expressions are never descended into), which keeps them cheap.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Sequence

from ...ast import Block, BlockRealize, For, PrimFunc, SeqStmt, Stmt, seq
from ...ast.node import Node


def stmt_children(stmt: Node) -> Iterator[Stmt]:
    """The statements directly below stmt (a BlockRealize's block counts as its child)."""
    for field in dataclasses.fields(stmt):
        value = getattr(stmt, field.name)
        if isinstance(value, Stmt):
            yield value
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, Stmt):
                    yield item


def walk(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement below and including stmt, pre-order."""
    yield stmt
    for child in stmt_children(stmt):
        yield from walk(child)


def path_to(root: Stmt, target: Node) -> list[Stmt] | None:
    """The statements from root down to target (both included), or None when target is not below."""
    if root is target:
        return [root]
    for child in stmt_children(root):
        found = path_to(child, target)
        if found is not None:
            return [root, *found]
    return None


def find_path(root: Stmt, predicate: Callable[[Stmt], bool]) -> list[Stmt] | None:
    """The path from root to the first statement (pre-order) satisfying predicate."""
    if predicate(root):
        return [root]
    for child in stmt_children(root):
        found = find_path(child, predicate)
        if found is not None:
            return [root, *found]
    return None


def replace(root: Stmt, mapping: dict[int, Stmt | None]) -> Stmt | None:
    """Rebuild root with the statements whose id is in mapping replaced (None removes them).

    Sequences drop removed items; a For, Block body or other single-child holder whose only child
    is removed is removed as well (an emptied loop nest vanishes).
    """
    if id(root) in mapping:
        return mapping[id(root)]
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(root):
        value = getattr(root, field.name)
        if isinstance(value, Stmt):
            new = replace(value, mapping)
            if new is not value:
                if new is None:
                    if field.name == "init" or field.name == "else_case":
                        changes[field.name] = None
                        continue
                    return None
                changes[field.name] = new
        elif isinstance(value, tuple) and any(isinstance(item, Stmt) for item in value):
            items = [replace(item, mapping) if isinstance(item, Stmt) else item for item in value]
            if any(a is not b for a, b in zip(items, value)):
                kept = [item for item in items if item is not None]
                if isinstance(root, SeqStmt):
                    if not kept:
                        return None
                    return seq(*kept)
                changes[field.name] = tuple(kept)
    return root.with_(**changes) if changes else root


def replace_in_func(func: PrimFunc, mapping: dict[int, Stmt | None]) -> PrimFunc:
    """func with statements replaced as in `replace`."""
    body = replace(func.body, mapping)
    if body is None:
        raise ValueError("replace removed the whole function body")
    return func.with_(body=body)


def block_realizes(root: Stmt) -> list[BlockRealize]:
    """Every BlockRealize below root, in program order."""
    return [s for s in walk(root) if isinstance(s, BlockRealize)]


def block_names(root: Stmt) -> set[str]:
    """The names of every block below root."""
    return {r.block.name for r in block_realizes(root)}


def fresh_block_name(root: Stmt, base: str) -> str:
    """base, or base_1, base_2, ... : the first name no block below root uses."""
    taken = block_names(root)
    if base not in taken:
        return base
    index = 1
    while f"{base}_{index}" in taken:
        index += 1
    return f"{base}_{index}"


def loops_between(path: Sequence[Stmt]) -> list[For]:
    """The For nodes of path after its last Block (the loops of the innermost scope)."""
    last_block = max((i for i, s in enumerate(path) if isinstance(s, Block)), default=-1)
    return [s for s in path[last_block + 1:] if isinstance(s, For)]


