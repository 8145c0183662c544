"""Index arithmetic of legalized kernels, made plain before they are scheduled.

A reshape is legalized through a flat offset, so `x (seq, 3072) -> (seq, 3, 16, 64)` reads
`x[f // 3072, f % 3072]` with `f = ((i * 3 + a) * 16 + b) * 64 + c`.  Under the block's iter
domains (`a < 3, b < 16, c < 64`) that is `x[i, a * 1024 + b * 64 + c]`, which the vectorizer
turns into contiguous loads; the flat form became a gather of divisions per lane.

`simplify_block_indices` rewrites the buffer indices of every block with `refcomp.shape.Analyzer`,
each iter var bound to its domain (the values it takes in every executed instance), so the
rewritten index equals the old one wherever the block runs.  `aligned_vector_width` picks a vector
loop width that keeps the remaining `v // d` and `v % d` of the vectorized iter constant across a
vector chunk.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.function import PrimFunc
from ...ast.functor import Mutator, collect, free_vars
from ...ast.stmt import Block


class _IndexSimplifier(Mutator):
    def __init__(self) -> None:
        super().__init__()
        self.scopes: list = []  # one Analyzer per enclosing non-root block

    def visit_Block(self, block: Block) -> Block:
        if block.name == "root" or not block.iter_vars:
            return self.generic_visit(block)
        from ...shape.analyzer import Analyzer

        analyzer = Analyzer()
        for outer in self.scopes:
            for var, rng in outer[1]:
                analyzer.bind(var, rng)
        binds = [(iv.var, iv.dom) for iv in block.iter_vars]
        for var, rng in binds:
            analyzer.bind(var, rng)
        self.scopes.append((analyzer, binds))
        try:
            body = self.visit(block.body)
            init = self.visit(block.init) if block.init is not None else None
        finally:
            self.scopes.pop()
        if body is block.body and init is block.init:
            return block
        return block.with_(body=body, init=init)

    def _simplified(self, indices: tuple) -> tuple:
        if not self.scopes:
            return indices
        analyzer = self.scopes[-1][0]
        out = []
        for index in indices:
            new = analyzer.simplify(index)
            out.append(new if new.dtype == index.dtype else index)
        return tuple(out)

    def visit_BufferLoad(self, load: tir.BufferLoad) -> tir.PrimExpr:
        load = self.generic_visit(load)
        indices = self._simplified(load.indices)
        return load if indices == load.indices else load.with_(indices=indices)

    def visit_BufferStore(self, store):
        store = self.generic_visit(store)
        indices = self._simplified(store.indices)
        return store if indices == store.indices else store.with_(indices=indices)


def simplify_block_indices(func: PrimFunc) -> PrimFunc:
    """func with the buffer indices of every block simplified under its iter domains, and each
    comparison of a select between constants with a constant decided per branch."""
    body = _IndexSimplifier().visit(_SelectCompareFolder().visit(func.body))
    return func if body is func.body else func.with_(body=body)


_COMPARE = {"LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
            "GE": lambda a, b: a >= b, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b}


class _SelectCompareFolder(Mutator):
    """`select(c, A, B) op K` with A, B, K constants becomes c, not c, true or false.

    A mask legalized as `where(tril(ones) > 0.5, x, y)` reads `select(i >= j, 1.0, 0.0) > 0.5`
    per element; this is exactly `i >= j` (A op K and B op K are decided, whatever c is)."""

    def _fold(self, node):
        node = self.generic_visit(node)
        op = _COMPARE.get(type(node).__name__)
        select, bound = node.a, node.b
        if op is None or not isinstance(select, tir.Select) or not _is_number(bound):
            return node
        if not (_is_number(select.true_value) and _is_number(select.false_value)) or select.condition.dtype.lanes != 1:
            return node
        when_true = op(select.true_value.value, bound.value)
        when_false = op(select.false_value.value, bound.value)
        if when_true and not when_false:
            return select.condition
        if when_false and not when_true:
            return tir.Not(select.condition)
        return tir.IntImm(1 if when_true else 0, "bool")

    visit_LT = visit_LE = visit_GT = visit_GE = visit_EQ = visit_NE = _fold


def _is_number(e) -> bool:
    """A finite int or float immediate (a NaN would make every comparison false)."""
    import math

    return isinstance(e, (tir.IntImm, tir.FloatImm)) and math.isfinite(e.value)


def aligned_vector_width(block: Block, var: tir.Var, extent: int, lanes: int) -> int:
    """The width of a vector loop over iter `var` (constant `extent`, `lanes` per register).

    When the block divides `var`'s expressions by constants d (`v // 64`, `v % 64`) and a d
    that is a multiple of lanes divides the extent, the widest such d: its chunks of `lanes`
    start at multiples of lanes within one d-block, so each `// d` is the same for the whole
    chunk.  Else `lanes`."""
    best = lanes
    for node in collect(block.body, (tir.FloorDiv, tir.FloorMod)):
        divisor = node.b
        if not isinstance(divisor, tir.IntImm) or var not in free_vars(node.a):
            continue
        d = divisor.value
        if d > best and d % lanes == 0 and extent % d == 0:
            best = d
    return best
