"""bind_repeated_math: a costly math call that one stored value computes more than once is
computed once, bound by a `Let`.

Inlining copies a producer's expression into every place its consumer reads it: softmax followed
by `where(isnan(p), 0, p)` computes `exp(x - max)` twice per element, and the C compiler does not
merge the two libmvec calls (external functions, not known to be pure).  This pass finds, in
each stored value, the largest call of COSTLY_MATH that occurs more than once (the same
expression, structurally) and binds it to a new variable, `let m = exp(..) in select(isnan(m /
s), 0, m / s)`, until none is left.  Math calls are pure, so the value is unchanged; a call that
uses a variable bound inside the value (another let) stays where it is.  It runs after
vectorization and binds vector calls only (a libmvec call per vector; the emitter prints a
statement expression, and in strict C99 and per-lane code substitutes the let back); scalar
code is left as it is.
"""
from __future__ import annotations

from typing import Any

from ...ast import BufferStore, Call, Let, Mutator, PrimFunc, Var, post_order_visit
from ...ast.functor import collect, free_vars
from ...shape.keys import expr_key

# math calls costing far more than a load or an add (a reduction reads such a stage from memory
# rather than computing it again per element; see refcomp.graph.passes.fuse_tir)
COSTLY_MATH = frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "erf",
                         "sin", "cos", "tan", "pow", "sinh", "cosh", "asin", "acos", "atan", "atan2"})


def has_costly_math(node: Any) -> bool:
    """True when node computes a COSTLY_MATH call or binds a value with a `Let` (the inline
    exponential of refcomp.ast.exp_poly is a chain of them: a dozen vector operations per
    element; a Let exists because its value is used more than once)."""
    return any(isinstance(n, Let) or n.op in COSTLY_MATH for n in collect(node, (Let, Call)))


def bind_repeated_math(func: PrimFunc) -> PrimFunc:
    """func with each costly call repeated within one stored value computed once (a Let)."""
    return _Stores().visit(func)


class _Stores(Mutator):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def visit_BufferStore(self, store: BufferStore) -> BufferStore:
        store = self.generic_visit(store)
        value = self.bind(store.value)
        return store if value is store.value else store.with_(value=value)

    def bind(self, value):
        while True:
            found = _repeated_call(value)
            if found is None:
                return value
            key, call = found
            self.count += 1
            var = Var(f"rc_m{self.count}", call.dtype)
            value = Let(var, call, _Replace(key, var).visit(value))


def _repeated_call(value) -> tuple[Any, Call] | None:
    """(key, call) of the largest COSTLY_MATH call occurring twice or more in value, else None."""
    bound: set = set()
    seen: dict[Any, list] = {}  # key -> [count, call, size]
    sizes: dict[int, int] = {}

    def look(node: Any) -> None:
        if isinstance(node, Let):
            bound.add(node.var)
        if isinstance(node, Call) and node.op in COSTLY_MATH and node.dtype.lanes > 1:
            key = expr_key(node)
            entry = seen.setdefault(key, [0, node, _size(node, sizes)])
            entry[0] += 1

    post_order_visit(value, look)
    best = None
    for key, (count, call, size) in seen.items():
        if count < 2 or set(free_vars(call)) & bound:
            continue
        if best is None or size > best[2]:
            best = (key, call, size)
    return None if best is None else (best[0], best[1])


def _size(node, sizes: dict) -> int:
    if id(node) not in sizes:
        total = [0]
        post_order_visit(node, lambda _: total.__setitem__(0, total[0] + 1))
        sizes[id(node)] = total[0]
    return sizes[id(node)]


class _Replace(Mutator):
    """Every occurrence of the expression with structural key `key` replaced by var."""

    def __init__(self, key, var: Var) -> None:
        super().__init__()
        self.key, self.var = key, var

    def visit_Call(self, call: Call):
        if call.op in COSTLY_MATH and call.dtype.lanes > 1 and expr_key(call) == self.key:
            return self.var
        return self.generic_visit(call)
