"""Pass `simplify`: fold constants, simplify index arithmetic, drop dead code under loop ranges.

Requires: any PrimFunc (blocks allowed: their iter vars are bound to their domains).
Guarantees: the same behaviour, and
  - expressions simplified by `refcomp.shape.simplify.Simplifier` in its wrap-around mode (exact
    under the IR's two's-complement integers); conditions are also decided by the Analyzer's fast
    path (`prover.ConditionProver`);
  - an IfThenElse whose condition is provably true or false under the enclosing loop ranges (and,
    with the Analyzer, the conditions of enclosing ifs and assertions) is replaced by the branch
    taken (e.g. the predicate of a perfect split, or a guard repeated inside the same guard);
  - `assume(...)` evaluations are dropped, and so are evaluations of constants;
  - loops of constant extent 1 become their body with the loop var replaced by the minimum (not
    thread-bound loops: the CUDA emitter needs every thread axis); loops of constant extent <= 0
    disappear; empty sequences collapse;
  - AssertStmt with a provably true condition is dropped; a false one is kept (it fails at run time).
Loop kinds, thread bindings, annotations, buffer scopes and Allocate are kept as they are.
"""
from __future__ import annotations

from ...ast import (
    Allocate, AssertStmt, Block, BlockRealize, BufferLoad, Call, Evaluate, For, IfThenElse, IntImm, LetStmt,
    Mutator, Not, PrimExpr, PrimFunc, SeqStmt, Stmt, While, collect, substitute,
)
from ...ast.functor import is_pure
from ...ast.expr import as_int
from ...shape.bounds import Bounds
from ...shape.simplify import Simplifier, is_false, is_true
from .prover import ConditionProver


def simplify(func: PrimFunc, use_analyzer: bool = True) -> PrimFunc:
    """func simplified (see the module docstring); use_analyzer=False: the wrap-around simplifier only."""
    body = _StmtSimplifier(use_analyzer).visit(func.body)
    return func.with_(body=body)


def reads_memory(expr: PrimExpr) -> bool:
    """expr loads from a buffer or calls something with effects (its value may change over time)."""
    return bool(collect(expr, BufferLoad)) or not is_pure(expr)


def noop() -> Stmt:
    """The statement that does nothing."""
    return Evaluate(IntImm(0, "int32"))


def is_noop(stmt: Stmt) -> bool:
    """stmt does nothing (an evaluated constant or an empty sequence)."""
    if isinstance(stmt, Evaluate):
        return isinstance(stmt.value, IntImm)
    return isinstance(stmt, SeqStmt) and not stmt.stmts


class _StmtSimplifier(Mutator):
    def __init__(self, use_analyzer: bool) -> None:
        super().__init__()
        self.bounds = Bounds()
        self.expr = Simplifier(wrap=True, bounds=self.bounds)
        self.prover = ConditionProver() if use_analyzer else None

    # expressions anywhere are simplified by the expression simplifier (it scopes Let itself)
    def visit(self, node):
        if isinstance(node, PrimExpr):
            return self.expr.simplify(node)
        return super().visit(node)

    def visit_Buffer(self, buffer):
        return buffer  # shapes of buffers keep their identity; flattening folded them already

    def _condition(self, condition: PrimExpr) -> PrimExpr:
        condition = self.expr.simplify(condition)
        if self.prover is not None and not (is_true(condition) or is_false(condition)):
            decided = self.prover.decide(condition)
            if decided is not None:
                return IntImm(int(decided), "bool")
        return condition

    def visit_For(self, loop: For) -> Stmt:
        minimum, extent = self.expr.simplify(loop.min), self.expr.simplify(loop.extent)
        count = as_int(extent)
        if count is not None and count <= 0:
            return noop()
        if count == 1 and loop.kind != "thread_binding" and not loop.annotations:
            if reads_memory(minimum):  # evaluate it once, where the loop did
                return self.visit(LetStmt(loop.loop_var, minimum, loop.body))
            return self.visit(substitute(loop.body, {loop.loop_var: minimum}))
        with self.bounds.bind_loop(loop.loop_var, minimum, extent), self._scoped(loop.loop_var, minimum, extent):
            body = self.visit(loop.body)
        if is_noop(body) and loop.kind != "thread_binding":
            return noop()
        return loop.with_(min=minimum, extent=extent, body=body)

    def _assuming(self, condition: PrimExpr):
        if self.prover is None:
            return _Nothing()
        return self.prover.assume(condition)

    def _scoped(self, var, minimum, extent):
        if self.prover is None:
            return _Nothing()
        return self.prover.loop(var, minimum, extent)

    def visit_IfThenElse(self, stmt: IfThenElse) -> Stmt:
        condition = self._condition(stmt.condition)
        if is_true(condition):
            return self.visit(stmt.then_case)
        if is_false(condition):
            return self.visit(stmt.else_case) if stmt.else_case is not None else noop()
        with self._assuming(condition):
            then_case = self.visit(stmt.then_case)
        else_case = None
        if stmt.else_case is not None:
            with self._assuming(Not(condition)):
                else_case = self.visit(stmt.else_case)
        if else_case is not None and is_noop(else_case):
            else_case = None
        if is_noop(then_case) and else_case is None:
            return noop()
        return stmt.with_(condition=condition, then_case=then_case, else_case=else_case)

    def visit_AssertStmt(self, stmt: AssertStmt) -> Stmt:
        condition = self._condition(stmt.condition)
        with self._assuming(condition):  # the body only runs when the assertion held
            body = self.visit(stmt.body)
        if is_true(condition):
            return body
        return stmt.with_(condition=condition, body=body)

    def visit_Evaluate(self, stmt: Evaluate) -> Stmt:
        value = stmt.value
        if isinstance(value, Call) and value.op == "assume":
            return noop()
        value = self.expr.simplify(value)
        if isinstance(value, (IntImm,)):
            return noop() if not is_noop(stmt) else stmt
        return stmt.with_(value=value)

    def visit_SeqStmt(self, stmt: SeqStmt) -> Stmt:
        items: list[Stmt] = []
        for s in stmt.stmts:
            new = self.visit(s)
            if isinstance(new, SeqStmt):
                items.extend(new.stmts)
            elif not is_noop(new):
                items.append(new)
        if not items:
            return noop()
        if len(items) == 1:
            return items[0]
        if len(items) == len(stmt.stmts) and all(a is b for a, b in zip(items, stmt.stmts)):
            return stmt
        return SeqStmt(tuple(items))

    def visit_LetStmt(self, stmt: LetStmt) -> Stmt:
        value = self.expr.simplify(stmt.value)
        with self.bounds.bind(stmt.var, self.bounds.of(value)):
            body = self.visit(stmt.body)
        return stmt.with_(value=value, body=body)

    def visit_Allocate(self, stmt: Allocate) -> Stmt:
        return stmt.with_(body=self.visit(stmt.body))

    def visit_While(self, stmt: While) -> Stmt:
        return stmt.with_(condition=self.expr.simplify(stmt.condition), body=self.visit(stmt.body))

    def visit_BlockRealize(self, realize: BlockRealize) -> Stmt:
        values = tuple(self.expr.simplify(v) for v in realize.iter_values)
        predicate = self._condition(realize.predicate)
        block = self.visit_Block(realize.block)
        return realize.with_(iter_values=values if any(a is not b for a, b in zip(values, realize.iter_values))
                             else realize.iter_values, predicate=predicate, block=block)

    def visit_Block(self, block: Block) -> Block:
        scopes = [self.bounds.bind_loop(iv.var, iv.dom.min, iv.dom.extent) for iv in block.iter_vars]
        for scope in scopes:
            scope.__enter__()
        try:
            body = self.visit(block.body)
            init = self.visit(block.init) if block.init is not None else None
        finally:
            for scope in reversed(scopes):
                scope.__exit__(None, None, None)
        return block.with_(body=body, init=init)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
