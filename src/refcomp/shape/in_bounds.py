"""Proofs that every buffer access of a PrimFunc stays inside its buffer, for all symbolic sizes.

    verify_in_bounds(func)          # raises ShapeError on the first access not proved
    check_accesses(func)            # every obligation with its ProofResult (for reports)

An obligation is one dimension of one access: `0 <= index < shape[dim]` under the facts in scope
(see refcomp.shape.facts).  A vector index (Ramp) must hold for its first and last lane.  A block
iter var binding must lie in the iter var's domain (when the predicate holds).  "unknown" is a
failure with its own message: the access is not known to be safe.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ast.buffer import Buffer
from ..ast.expr import Broadcast, IntImm, PrimExpr, Ramp, Var
from ..ast.function import IRModule, PrimFunc
from ..ast.functor import free_vars
from ..ast.stmt import BlockRealize, BufferStore, MatchBufferRegion
from ..errors import ShapeError
from .evaluate import EvaluationError, evaluate
from .facts import ScopeWalker
from .keys import expr_key
from .prove import ProofResult, prove, record_fast_proof
from .render import render


@dataclass
class Obligation:
    """One claim about one access: `claim` must hold under `assumptions`."""

    func: str
    block: str | None
    node: Any            # the BufferLoad / BufferStore / BlockRealize / MatchBufferRegion
    kind: str            # "load", "store", "binding", "match"
    buffer: Buffer | None
    dim: int
    index: PrimExpr
    extent: PrimExpr     # the dim's size (or the domain's extent for a binding)
    lower: PrimExpr      # 0 (or the domain's min for a binding)
    claim: PrimExpr
    assumptions: list[PrimExpr]
    var_order: list[Var]
    result: ProofResult | None = None
    message: str = field(default="")
    stmt: Any = None     # the statement whose own expressions hold the access
    path: tuple[PrimExpr, ...] = ()  # lazy-branch conditions between that statement and the access

    @property
    def proved(self) -> bool:
        """True when the claim was proved."""
        return self.result is not None and self.result.proved

    def access_text(self) -> str:
        """The access as the user wrote it: `A[i*32 + j]`."""
        node = self.node
        if self.kind in ("load", "store"):
            indices = node.indices
            return f"{self.buffer.name}[{', '.join(render(i) for i in indices)}]"
        if self.kind == "match":
            return f"match_buffer region of {self.buffer.name}"
        block = node.block
        return f"binding {block.iter_vars[self.dim].var.name} = {render(node.iter_values[self.dim])} of block {block.name}"

    def counterexample(self) -> dict[str, int] | None:
        """The solver's values, ordered: sizes first, then loops outer to inner."""
        if self.result is None or self.result.counterexample is None:
            return None
        model = self.result.model
        named = self.result.counterexample
        by_var = {var: value for var, value in model.items()}
        ordered: dict[str, int] = {}
        names = {}
        for var, name in zip(model, named):
            names[var] = name
        mentioned = _mentioned(self)
        for var in self.var_order + list(model):
            if var in by_var and names[var] not in ordered and var in mentioned:
                ordered[names[var]] = by_var[var]
        for name, value in named.items():  # values of loads the index depends on
            if "[" in name:
                ordered.setdefault(name, value)
        return ordered


def _mentioned(ob: Obligation) -> set:
    return set(free_vars((ob.claim, *ob.assumptions)))


class _Checker(ScopeWalker):
    def __init__(self, func: PrimFunc, timeout_ms: int | None, overflow: str, solve: bool = True) -> None:
        super().__init__(func)
        self.timeout_ms = timeout_ms
        self.overflow = overflow
        self.solve = solve
        self.obligations: list[Obligation] = []

    def on_access(self, node: Any, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> None:
        """Add the obligations of one access, one per dimension (and lane end)."""
        kind = "store" if isinstance(node, BufferStore) else "match" if isinstance(node, MatchBufferRegion) else "load"
        for dim, (index, extent) in enumerate(zip(indices, buffer.shape)):
            for lane_index in _lane_extremes(index):
                claim = _within(lane_index, IntImm(0, lane_index.dtype), extent)
                self._add(node, kind, buffer, dim, lane_index, extent, IntImm(0, lane_index.dtype), claim)

    def on_binding(self, realize: BlockRealize, index: int) -> None:
        """Add the obligation that a binding lies in its iter var's domain."""
        iv = realize.block.iter_vars[index]
        value = realize.iter_values[index]
        if value.dtype.lanes != 1:
            return
        claim = _within(value, iv.dom.min, iv.dom.extent)
        self._add(realize, "binding", None, index, value, iv.dom.extent, iv.dom.min, claim, realize.block.name)

    def _add(self, node, kind, buffer, dim, index, extent, lower, claim, block=None) -> None:
        if block is None and self.block_stack:
            block = self.block_stack[-1]
        ob = Obligation(self.func.name, block, node, kind,
                        buffer, dim, index, extent, lower, claim, [], list(self.var_order),
                        stmt=self.current_stmt, path=tuple(self.path_conditions))
        self.obligations.append(ob)
        if not self.solve:
            if claim is not None:
                ob.assumptions = _relevant(claim, self.analyzer.assumption_exprs())
            return
        if claim is None:
            ob.result = ProofResult("unknown", reason="the index is a vector expression refcomp cannot split into lanes")
        elif self.overflow == "assume_none" and self.analyzer.can_prove(claim):
            # the simplifier shares the no-overflow reading; under "wrap" only Z3 decides
            ob.result = record_fast_proof()
        else:
            ob.assumptions = _relevant(claim, self.analyzer.assumption_exprs())
            ob.result = prove(claim, ob.assumptions, timeout_ms=self.timeout_ms, overflow=self.overflow,
                              use_fast_path=False)
        if not ob.proved:
            ob.message = _describe(ob)


def _within(index: PrimExpr, lower: PrimExpr, extent: PrimExpr) -> PrimExpr | None:
    if index.dtype.lanes != 1:
        return None
    # compare in the widest of the types: casting an int64 extent down to an int32 index would wrap
    wide = max((index.dtype, lower.dtype, extent.dtype), key=lambda t: (t.bits, t.is_int))
    if isinstance(lower, IntImm):
        lower = IntImm(lower.value, wide)
    index, lower, extent = (_as(v, wide) for v in (index, lower, extent))
    upper = extent if isinstance(lower, IntImm) and lower.value == 0 else lower + extent
    return (lower <= index) & (index < upper)


def _as(value: PrimExpr, dtype) -> PrimExpr:
    return value if value.dtype == dtype else value.astype(dtype)


def _lane_extremes(index: PrimExpr) -> list[PrimExpr]:
    """Scalar expressions whose bounds cover every lane of index (first and last lane of a ramp)."""
    if index.dtype.lanes == 1:
        return [index]
    if isinstance(index, Ramp) and index.base.dtype.lanes == 1:
        last = index.base + index.stride * IntImm(index.lanes - 1, index.stride.dtype)
        return [index.base, last]
    if isinstance(index, Broadcast):
        return _lane_extremes(index.value)
    return [index]  # _within turns this into an "unknown" obligation


def _relevant(claim: PrimExpr, facts: list[PrimExpr]) -> list[PrimExpr]:
    """The facts connected to the claim through shared variables (others cannot matter)."""
    wanted = set(free_vars(claim))
    fact_vars = [set(free_vars(f)) for f in facts]
    chosen = [False] * len(facts)
    changed = True
    while changed:
        changed = False
        for k, variables in enumerate(fact_vars):
            if not chosen[k] and (variables & wanted or not variables):
                chosen[k] = True
                wanted |= variables
                changed = True
    seen, out = set(), []
    for k, fact in enumerate(facts):
        key = expr_key(fact)
        if chosen[k] and key not in seen:
            seen.add(key)
            out.append(fact)
    return out


_ORDINAL = {0: "row", 1: "column"}


def _describe(ob: Obligation) -> str:
    """The user-facing message of a failed obligation."""
    access = ob.access_text()
    where = f"{ob.func}" + (f", block {ob.block}" if ob.block else "")
    result = ob.result
    assert result is not None
    if ob.kind == "binding":
        head = f"{access} may fall outside its domain [{render(ob.lower)}, {render(ob.lower)} + {render(ob.extent)})"
    else:
        verb = {"load": "load from", "store": "store to", "match": "region of"}[ob.kind]
        shape = ", ".join(render(d) for d in ob.buffer.shape)
        head = (f"{verb} {access} may be out of bounds in dim {ob.dim} of {ob.buffer.name} "
                f"(shape ({shape}{',' if len(ob.buffer.shape) == 1 else ''})) in {where}")
    if result.disproved:
        return f"{head}: {_witness(ob)}"
    return f"{head}: not proved ({result.reason or 'unknown'}); add an assumption or a guard"


def _witness(ob: Obligation) -> str:
    """`n = 33, i = 1, j = 1: A[i*32 + j] reads row 33 of 33`."""
    cex = ob.counterexample() or {}
    values = ", ".join(f"{k} = {v}" for k, v in cex.items())
    try:
        index = evaluate(ob.index, ob.result.model)
        extent = evaluate(ob.extent, ob.result.model)
        lower = evaluate(ob.lower, ob.result.model)
    except EvaluationError:
        return values
    if ob.kind == "binding":
        return f"{values}: {render(ob.index)} is {index}, outside [{lower}, {lower + extent})"
    verb = "writes" if ob.kind == "store" else "reads"
    # rows and columns for 1-d and 2-d buffers, dims by number beyond
    word = _ORDINAL[ob.dim] if len(ob.buffer.shape) <= 2 else f"index along dim {ob.dim}"
    return f"{values}: {ob.access_text()} {verb} {word} {index} of {extent}"


def collect_obligations(func: PrimFunc) -> list[Obligation]:
    """Every in-bounds obligation of func with the facts it may use, not yet proved (result None)."""
    checker = _Checker(func, None, "assume_none", solve=False)
    checker.run()
    return checker.obligations


def check_accesses(func: PrimFunc, *, timeout_ms: int | None = None, overflow: str = "assume_none") -> list[Obligation]:
    """Every in-bounds obligation of func, each with its ProofResult."""
    checker = _Checker(func, timeout_ms, overflow)
    checker.run()
    return checker.obligations


def verify_in_bounds(func: "PrimFunc | IRModule", *, timeout_ms: int | None = None,
                     overflow: str = "assume_none") -> None:
    """Raise ShapeError naming the first access not proved in bounds (with a counterexample if any)."""
    if isinstance(func, IRModule):
        for _, item in func:
            if isinstance(item, PrimFunc):
                verify_in_bounds(item, timeout_ms=timeout_ms, overflow=overflow)
        return
    failures = [ob for ob in check_accesses(func, timeout_ms=timeout_ms, overflow=overflow) if not ob.proved]
    if not failures:
        return
    first = failures[0]
    more = f" (and {len(failures) - 1} more unproved accesses)" if len(failures) > 1 else ""
    hint = None
    if first.result is not None and first.result.unknown:
        hint = "state a fact with assume(...) or attrs['assumptions'], or build with bounds='runtime'"
    elif first.kind != "binding":
        hint = "guard the access with a predicate, pad the buffer, or state the sizes' relation in attrs['assumptions']"
    raise ShapeError(first.message + more, ir=func, spot=first.node, counterexample=first.counterexample(), hint=hint)
