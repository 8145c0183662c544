"""Conventions shared by the script printer and parser: names, loop ranges, intrinsic spellings."""
from __future__ import annotations

import dataclasses
import keyword
import re
from typing import Any

from .dtype import DataType, bool_
from .expr import Add, IntImm, PrimExpr, Sub, Var
from .intrinsics import ANY_UNARY, FLOAT_BINARY, FLOAT_UNARY, PREDICATES
from .node import Node

# Names the script itself uses at the top level; a user's var or buffer never takes them.
RESERVED = frozenset({"T", "I", "R", "range"}) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)

# For kinds and the T.<function> that spells each loop.
LOOP_FUNCTIONS = {"serial": "serial", "parallel": "parallel", "vectorized": "vectorized",
                  "unrolled": "unroll", "thread_binding": "thread_binding"}
LOOP_KINDS = {spelling: kind for kind, spelling in LOOP_FUNCTIONS.items()}

# Intrinsics spelled T.<name>(args...) whose result dtype follows from their arguments.
SIMPLE_INTRINSICS = frozenset(FLOAT_UNARY + FLOAT_BINARY + ANY_UNARY + PREDICATES
                              + ("if_then_else", "assume", "tvm_storage_sync", "address_of", "prefetch"))


def sanitize(name: str) -> str:
    """An ASCII identifier close to name: other characters become `_` (so `a; exit(1);` is safe)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    if text[0].isdigit():
        text = "_" + text
    if text in RESERVED:
        text += "_"
    return text


class Namer:
    """Gives every var and buffer one printable name, unique in the text, in definition order.

    The same IR always gets the same names: `i`, then `i_1`, `i_2` for later vars also named `i`.
    Graph-level printers (refcomp.ast.graph_script) receive this object and call `name(obj, hint)`.
    """

    def __init__(self) -> None:
        self.names: dict[Any, str] = {}
        self.taken: set[str] = set()
        self.counters: dict[str, int] = {}

    def name(self, obj: Any, hint: str | None = None) -> str:
        """The printed name of obj, choosing a fresh one (from hint or obj.name) on first use."""
        found = self.names.get(obj)
        if found is not None:
            return found
        base = sanitize(hint if hint is not None else getattr(obj, "name", "v"))
        candidate, counter = base, self.counters.get(base, 0)
        while candidate in self.taken:
            counter += 1
            candidate = f"{base}_{counter}"
        self.counters[base] = counter  # the next `base` starts its search here (linear, not quadratic)
        self.taken.add(candidate)
        self.names[obj] = candidate
        return candidate

    def has(self, obj: Any) -> bool:
        return obj in self.names


def extent_of(begin: PrimExpr, end: PrimExpr) -> PrimExpr:
    """The extent of the half-open range [begin, end) as the script writes it.

    The printer writes [m, m + e) as `m, m + e` (constants folded, `0, e` as just `e`), so this
    recovers exactly `e` for everything the printer writes, and `end - begin` otherwise.
    """
    from .structural import structural_equal

    if isinstance(begin, IntImm) and begin.value == 0:
        return end
    if isinstance(begin, IntImm) and isinstance(end, IntImm) and begin.dtype == end.dtype:
        return IntImm(end.value - begin.value, begin.dtype)
    if isinstance(end, Add) and structural_equal(end.a, begin, map_free_vars=False):
        return end.b
    return Sub(end, begin)


def default_call_dtype(op: str, args: tuple[PrimExpr, ...]) -> DataType | None:
    """The dtype `T.<op>(args)` gives when no dtype is written, or None if it must be written."""
    if op in PREDICATES and args:
        return bool_.with_lanes(args[0].dtype.lanes)
    if op in FLOAT_UNARY or op in FLOAT_BINARY or op in ANY_UNARY:
        return args[0].dtype if args else None
    if op == "if_then_else" and len(args) == 3:
        return args[1].dtype
    if op == "assume":
        return bool_
    if op in ("tvm_storage_sync", "prefetch"):
        return DataType("int32")
    if op == "address_of":
        return DataType("handle")
    return None


# ---------------------------------------------------------------------- one fast pass over a tree

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_BINDER_FIELDS = {("For", "loop_var"), ("LetStmt", "var"), ("Let", "var"), ("IterVar", "var")}


def _field_names(node: Any) -> tuple[str, ...]:
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class TreeFacts:
    """What the printer needs to know about a tree, gathered in one pass that visits each node once.

    `free_vars` equals `refcomp.ast.free_vars(tree)` (same order); `buffers` are all buffers met,
    in first-seen order; `declared` the buffers an alloc_buffer, match_buffer or Allocate
    declares; `has_block` whether any Block occurs.
    """

    def __init__(self, root: Any) -> None:
        self.free_vars: dict[Any, None] = {}
        self.buffers: dict[Any, None] = {}
        self.declared: set[Any] = set()
        self.has_block = False
        self._bound: set[Any] = set()
        self._seen: set[int] = set()
        self._walk(root)

    def _walk(self, value: Any) -> None:
        if isinstance(value, tuple):
            for item in value:
                self._walk(item)
            return
        if not isinstance(value, Node):
            return
        if isinstance(value, Var):
            if value not in self._bound:
                self.free_vars.setdefault(value, None)
            return
        if id(value) in self._seen:
            return
        self._seen.add(id(value))
        kind = type(value).__name__
        if kind == "Buffer":
            self.buffers.setdefault(value, None)
        elif kind == "Block":
            self.has_block = True
            self.declared.update(value.alloc_buffers)
            self.declared.update(m.buffer for m in value.match_buffers)
        elif kind == "Allocate":
            self.declared.add(value.buffer)
        for name in _field_names(value):
            item = getattr(value, name)
            if (kind, name) in _BINDER_FIELDS:
                self._bound.add(item)
            elif kind == "Block" and name == "iter_vars":
                for iv in item:
                    self._walk(iv.dom)
                    self._bound.add(iv.var)
            else:
                self._walk(item)
