"""Facts in scope while walking a PrimFunc: loop ranges, block bindings, predicates, conditions.

`ScopeWalker` visits every statement and expression of a function with an Analyzer that holds
exactly the facts that are true at that point, and calls `on_access` for each buffer load and
store (and `on_binding` for each block iter var binding).  Subclasses decide what to do there:
prove it (in_bounds) or guard it (guards).

Facts come from: SizeVar >= 0 (the prover's variable ranges), every dim of a parameter buffer is
>= 0 (it is bound from an array), func attrs "assumptions", For ranges, block iter var domains and
bindings, block predicates, if conditions (else: the negation), while conditions, LetStmt / Let
values, AssertStmt conditions (checked at run time before the body), `assume(c)` calls (for the
statements after them), and the condition of a lazy `if_then_else` inside its branches.

A fact that reads a buffer is dropped for a scope that stores to that buffer (or hands its address
to an opaque call): after the store the fact may no longer hold.  Dropping a fact only makes
proofs harder, never wrong.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ..ast.buffer import Buffer
from ..ast.expr import (
    BinaryOp, Broadcast, BufferLoad, Call, Cast, IntImm, Let, Not, PrimExpr, Ramp, Range, Select,
    Var, convert,
)
from ..ast.function import PrimFunc
from ..ast.functor import collect, free_vars
from ..ast.intrinsics import addressed_writes
from ..ast.stmt import (
    Allocate, AssertStmt, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, LetStmt,
    SeqStmt, Stmt, While,
)
from .analyzer import Analyzer


def function_assumptions(func: PrimFunc) -> list[PrimExpr]:
    """The facts a PrimFunc states for its callers: attrs["assumptions"] (one expr or a sequence)."""
    stated = func.attrs.get("assumptions", ())
    if isinstance(stated, PrimExpr):
        stated = (stated,)
    out = []
    for item in stated:
        item = convert(item)
        if not item.dtype.is_bool:
            raise TypeError(f"function {func.name}: assumption {item!r} is not a bool expression")
        out.append(item)
    return out


class ScopeWalker:
    """Walks a PrimFunc keeping the facts in scope in `self.analyzer` (see module docstring)."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.analyzer = Analyzer()
        self.block_stack: list[str] = []
        self.var_order: list[Var] = []  # variables in the order they came into scope
        self._introduced: set[Var] = set()
        self.current_stmt: Stmt | None = None  # the statement whose own expressions are walked
        self.path_conditions: list[PrimExpr] = []  # lazy branch conditions inside that statement
        self._stored: dict[Any, set] = {}  # scope -> buffers stored to inside it

    # ---------------------------------------------------------------- hooks
    def on_access(self, node: Any, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> None:
        """Called for every BufferLoad and BufferStore with the facts of its position."""

    def on_binding(self, realize: BlockRealize, index: int) -> None:
        """Called for each iter var binding of a block realize (under its predicate)."""

    # ---------------------------------------------------------------- driver
    def run(self) -> None:
        """Walk the whole function, calling the hooks."""
        func = self.func
        for param in func.params:
            variables = [param] if isinstance(param, Var) else free_vars(param.shape)
            for var in variables:
                self._introduce(var)
        with contextlib.ExitStack() as stack:
            for buffer in func.buffers:
                for dim in buffer.shape:
                    if not isinstance(dim, IntImm) and dim.dtype.lanes == 1:
                        stack.enter_context(self.analyzer.constraint(IntImm(0, dim.dtype) <= dim))
            for assumption in function_assumptions(func):
                for var in free_vars(assumption):
                    self._introduce(var)
                stack.enter_context(self.fact(assumption, func.body))
            self.stmt(func.body)

    def _introduce(self, var: Var) -> None:
        if var not in self._introduced:  # a set: `in` on a list would build EQ nodes
            self._introduced.add(var)
            self.var_order.append(var)

    @contextlib.contextmanager
    def fact(self, condition: PrimExpr, scope: Any = None) -> Iterator[None]:
        """condition is a fact while walking scope (dropped if scope may change what it reads)."""
        if self._stale_in(condition, scope):
            yield
            return
        with self.analyzer.constraint(condition):
            yield

    @contextlib.contextmanager
    def bind(self, var: Var, value: Any, scope: Any = None) -> Iterator[None]:
        """var has this range (or value) while walking scope, unless scope may change it."""
        parts = (value.min, value.extent) if isinstance(value, Range) else (value,)
        if any(self._stale_in(part, scope) for part in parts):
            yield
            return
        with self.analyzer.bound_scope(var, value):
            yield

    def _stale_in(self, expr: PrimExpr, scope: Any) -> bool:
        """Whether expr reads a buffer that scope stores to: then a fact about it may go stale."""
        if scope is None:
            return False
        loaded = {load.buffer for load in collect(expr, BufferLoad)}
        if not loaded:
            return False
        stored = self._stored.get(scope) if not isinstance(scope, tuple) else None
        if stored is None:
            stored = {store.buffer for store in collect(scope, BufferStore)}
            stored |= {call_buffer for call_buffer in _opaque_writes(scope, self.func.attrs)}
            if not isinstance(scope, tuple):
                self._stored[scope] = stored
        return bool(loaded & stored)

    # ---------------------------------------------------------------- statements
    def stmt(self, node: Stmt) -> None:
        """Walk a statement with the facts of its position."""
        outer, self.current_stmt = self.current_stmt, node
        try:
            self._stmt(node)
        finally:
            self.current_stmt = outer

    def _stmt(self, node: Stmt) -> None:
        kind = type(node)
        if kind is SeqStmt:
            self.seq(node.stmts)
        elif kind is For:
            self.expr(node.min)
            self.expr(node.extent)
            self._introduce(node.loop_var)
            with self.bind(node.loop_var, Range(node.min, node.extent), node.body):
                self.stmt(node.body)
        elif kind is BlockRealize:
            self.block_realize(node)
        elif kind is Block:  # a bare block (no realize): its iter vars range over their domains
            self.block_body(node)
        elif kind is BufferStore:
            self.expr(node.value)
            for index in node.indices:
                self.expr(index)
            self.on_access(node, node.buffer, node.indices)
        elif kind is IfThenElse:
            self.expr(node.condition)
            with self.fact(node.condition, node.then_case):
                self.stmt(node.then_case)
            if node.else_case is not None:
                with self.fact(Not(node.condition), node.else_case):
                    self.stmt(node.else_case)
        elif kind is LetStmt:
            self.expr(node.value)
            self._introduce(node.var)
            with self._let(node.var, node.value, node.body):
                self.stmt(node.body)
        elif kind is AssertStmt:
            self.expr(node.condition)
            with self.fact(node.condition, node.body):
                self.stmt(node.body)
        elif kind is While:
            self.expr(node.condition)
            with self.fact(node.condition, node.body):
                self.stmt(node.body)
        elif kind is Allocate:
            for dim in node.buffer.shape:
                self.expr(dim)
            self.stmt(node.body)
        elif kind is Evaluate:
            self.expr(node.value)
        else:
            for name in node.fields():
                value = getattr(node, name)
                if isinstance(value, Stmt):
                    self.stmt(value)

    def seq(self, stmts: tuple[Stmt, ...]) -> None:
        """Walk statements in order; an assume() becomes a fact for those after it."""
        with contextlib.ExitStack() as stack:
            for k, item in enumerate(stmts):
                self.stmt(item)
                assumed = _assumed(item)
                if assumed is not None:  # assume(c) holds for the statements after it
                    stack.enter_context(self.fact(assumed, stmts[k + 1:]))

    @contextlib.contextmanager
    def _let(self, var: Var, value: PrimExpr, scope: Any = None) -> Iterator[None]:
        if var.dtype.is_integer and var.dtype.lanes == 1:
            with self.bind(var, value, scope):
                yield
        elif var.dtype.is_bool:
            with self.fact(var == value, scope):
                yield
        else:
            yield

    def block_realize(self, realize: BlockRealize) -> None:
        """Walk a block realize: predicate, bindings and domains become facts."""
        block = realize.block
        for value in realize.iter_values:
            self.expr(value)
        self.expr(realize.predicate)
        with self.fact(realize.predicate, block):
            for index in range(len(block.iter_vars)):
                self.on_binding(realize, index)
            with contextlib.ExitStack() as stack:
                for iv, value in zip(block.iter_vars, realize.iter_values):
                    self._introduce(iv.var)
                    if value.dtype == iv.var.dtype and value.dtype.lanes == 1:
                        stack.enter_context(self.bind(iv.var, value, block))
                    stack.enter_context(self.fact(_in_range(iv.var, iv.dom), block))
                self._block_contents(block)

    def block_body(self, block: Block) -> None:
        """Walk a bare block, its iter vars ranging over their domains."""
        with contextlib.ExitStack() as stack:
            for iv in block.iter_vars:
                self._introduce(iv.var)
                stack.enter_context(self.bind(iv.var, iv.dom, block))
            self._block_contents(block)

    def _block_contents(self, block: Block) -> None:
        self.block_stack.append(block.name)
        try:
            for match in block.match_buffers:
                region = match.source.region
                self.on_access(match, match.source.buffer, tuple(r.min for r in region))
                last = tuple(r.min + r.extent - 1 for r in region)
                self.on_access(match, match.source.buffer, last)
            if block.init is not None:
                self.stmt(block.init)
            self.stmt(block.body)
        finally:
            self.block_stack.pop()

    # ---------------------------------------------------------------- expressions
    def expr(self, node: PrimExpr) -> None:
        """Walk an expression, with lazy branch conditions as facts inside the branches."""
        kind = type(node)
        if kind is BufferLoad:
            for index in node.indices:
                self.expr(index)
            self.on_access(node, node.buffer, node.indices)
        elif kind is Call and node.op == "if_then_else" and len(node.args) == 3:
            cond, then_value, else_value = node.args
            self.expr(cond)
            for branch, holds in ((then_value, cond), (else_value, Not(cond))):
                self.path_conditions.append(holds)
                try:
                    with self.fact(holds):
                        self.expr(branch)
                finally:
                    self.path_conditions.pop()
        elif kind is Let:
            self.expr(node.value)
            self._introduce(node.var)
            with self._let(node.var, node.value):
                self.expr(node.body)
        elif isinstance(node, BinaryOp):
            self.expr(node.a)
            self.expr(node.b)
        elif kind is Call:
            for arg in node.args:
                self.expr(arg)
        elif kind is Select:
            self.expr(node.condition)
            self.expr(node.true_value)
            self.expr(node.false_value)
        elif kind in (Cast, Not):
            self.expr(node.value if kind is Cast else node.a)
        elif kind is Ramp:
            self.expr(node.base)
            self.expr(node.stride)
        elif kind is Broadcast:
            self.expr(node.value)

    def location(self) -> str:
        """`function main, block C` for messages."""
        where = f"function {self.func.name}"
        if self.block_stack:
            where += f", block {self.block_stack[-1]}"
        return where


def _assumed(stmt: Stmt) -> PrimExpr | None:
    if isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == "assume":
        if stmt.value.args and stmt.value.args[0].dtype.is_bool:
            return stmt.value.args[0]
    return None


def _in_range(var: Var, dom: Range) -> PrimExpr:
    lo = dom.min if dom.min.dtype == var.dtype else dom.min.astype(var.dtype)
    extent = dom.extent if dom.extent.dtype == var.dtype else dom.extent.astype(var.dtype)
    return (lo <= var) & (var < lo + extent)


def _opaque_writes(scope: Any, attrs: Any = None) -> set:
    """Buffers an opaque call (call_extern, ...) may write: those whose elements it takes the
    address of, but for a tensor intrinsic's operand declared read (attrs: the function's, with
    refcomp.ast.intrinsics.EXTERN_ACCESS), and any other buffer a call_extern loads from."""
    out = addressed_writes(scope, attrs)
    for call in collect(scope, Call):
        if call.op in ("call_extern", "tvm_storage_sync"):
            addressed = {id(load) for arg in call.args if isinstance(arg, Call) and arg.op == "address_of"
                         for load in arg.args}
            out |= {load.buffer for load in collect(call, BufferLoad) if id(load) not in addressed}
    return out
