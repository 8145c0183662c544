"""`prove(cond, assumptions)`: proved, disproved with a checked counterexample, or unknown.

The fast path asks the simplifier (under the assumptions as facts); what it cannot settle goes to
Z3 with the exact encoding of refcomp.shape.z3_bridge, as "is there an assignment where the
assumptions hold and cond does not?".  unsat: proved.  sat: the model is turned into values for
every free variable and *re-checked by refcomp's own evaluator*; only a counterexample that really
violates cond is reported as disproved.  Anything else (timeout, a model that does not check) is
unknown, which callers treat as "not proved".

Results are cached by the structure of the query.  REFCOMP_SMT_DUMP=dir writes every Z3 query to
dir as an SMT-LIB file; REFCOMP_SMT_TIMEOUT_MS sets the default time limit (2000 ms).
"""
from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..ast.expr import IntImm, PrimExpr, SizeVar, Var, convert
from ..ast.functor import free_vars
from .evaluate import EvaluationError, evaluate
from .keys import expr_key
from .render import render

if TYPE_CHECKING:
    from .z3_bridge import Encoder

# z3 is imported on the first query that needs it: `import refcomp.shape` (done by lowering and
# scheduling for the fast path) stays cheap.

DEFAULT_TIMEOUT_MS = 2000
_CACHE_LIMIT = 50_000


@dataclass(frozen=True)
class ProofResult:
    """The answer to one claim: status "proved", "disproved" (with counterexample) or "unknown"."""

    status: str
    counterexample: Mapping[str, int] | None = None  # read-only
    reason: str = ""
    via: str = "fast"  # "fast" (simplifier) or "z3"
    model: Mapping[Var, Any] = field(default_factory=dict, compare=False, repr=False)  # read-only

    @property
    def proved(self) -> bool:
        """True when the claim holds."""
        return self.status == "proved"

    @property
    def disproved(self) -> bool:
        """True when a checked counterexample was found."""
        return self.status == "disproved"

    @property
    def unknown(self) -> bool:
        """True when neither could be shown (treat as not proved)."""
        return self.status == "unknown"

    def __bool__(self) -> bool:
        """True only when proved: `if prove(c):` fails closed."""
        return self.proved

    def __repr__(self) -> str:
        parts = [repr(self.status)]
        if self.counterexample is not None:
            parts.append(f"counterexample={dict(self.counterexample)!r}")
        if self.reason:
            parts.append(f"reason={self.reason!r}")
        parts.append(f"via={self.via!r}")
        return f"ProofResult({', '.join(parts)})"

    def describe(self) -> str:
        """`n = 33, i = 1` for a counterexample, else the status and reason."""
        if self.counterexample is not None:
            return ", ".join(f"{k} = {v}" for k, v in self.counterexample.items())
        return f"{self.status}{': ' + self.reason if self.reason else ''}"


_cache: dict[Any, ProofResult] = {}
_stats = {"queries": 0, "fast": 0, "z3": 0, "cached": 0}


def stats() -> dict[str, int]:
    """Counts of prove() calls and how each was answered (for benchmarks)."""
    return dict(_stats)


def reset_stats() -> None:
    """Zero the counters of stats()."""
    for key in _stats:
        _stats[key] = 0


def record_fast_proof() -> ProofResult:
    """A "proved" result for a claim the caller's own Analyzer settled (counted like prove's fast path)."""
    _stats["queries"] += 1
    _stats["fast"] += 1
    return ProofResult("proved", via="fast")


def clear_cache() -> None:
    """Forget every cached answer (and the analyzers kept for repeated assumptions)."""
    _cache.clear()
    _ANALYZERS.clear()


def prove(condition: "PrimExpr | bool", assumptions: Iterable[PrimExpr] = (), *,
          timeout_ms: int | None = None, overflow: str = "assume_none", analyzer=None,
          use_fast_path: bool = True) -> ProofResult:
    """Whether condition holds for every value of its free variables satisfying assumptions.

    overflow: "assume_none" (mathematical integers) or "wrap" (two's-complement + - *), see
    refcomp.shape.z3_bridge.  analyzer: an Analyzer already holding the assumptions as facts
    (saves rebuilding one for the fast path).
    """
    condition = convert(condition)
    assumptions = tuple(convert(a) for a in assumptions)
    _stats["queries"] += 1
    key = (expr_key(condition), tuple(expr_key(a) for a in assumptions), overflow, use_fast_path)
    cached = _cache.get(key)
    if cached is not None:
        _stats["cached"] += 1
        return cached
    result = None
    if use_fast_path and overflow == "assume_none":
        result = _fast(condition, assumptions, analyzer)
    if result is None:
        result = _solve(condition, assumptions, timeout_ms, overflow)
        _stats["z3"] += 1
    else:
        _stats["fast"] += 1
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = result
    return result


def _fast(condition: PrimExpr, assumptions: Sequence[PrimExpr], analyzer) -> ProofResult | None:
    if analyzer is None:
        if not assumptions and isinstance(condition, IntImm):
            return ProofResult("proved") if condition.value else None
        analyzer = _analyzer_for(assumptions)
    if analyzer.can_prove(condition):
        return ProofResult("proved", via="fast")
    return None


# Analyzers already holding a set of assumptions, most recently used last: callers (the in-bounds
# checker, schedule legality) ask many claims under the same facts, and an analyzer's caches stay
# valid for as long as its facts do.
_ANALYZERS: "OrderedDict[Any, Any]" = OrderedDict()
_ANALYZER_LIMIT = 64


def _analyzer_for(assumptions: Sequence[PrimExpr]):
    from .analyzer import Analyzer

    key = tuple(expr_key(a) for a in assumptions)
    analyzer = _ANALYZERS.get(key)
    if analyzer is not None:
        _ANALYZERS.move_to_end(key)
        return analyzer
    analyzer = Analyzer()
    for var, rng in ranges_from(assumptions).items():
        analyzer.bind(var, rng)
    for assumption in assumptions:
        analyzer.assume(assumption)
    _ANALYZERS[key] = analyzer
    if len(_ANALYZERS) > _ANALYZER_LIMIT:
        _ANALYZERS.popitem(last=False)
    return analyzer


def ranges_from(assumptions: Sequence[PrimExpr]) -> dict:
    """Loop-style ranges `lo <= v`, `v < hi` found among the assumptions, as {v: Range(lo, hi - lo)}.

    The fast path reasons better about a variable with a range than about two loose facts.
    """
    from ..ast.expr import GE, GT, LE, LT, And, Range

    lower: dict[Var, PrimExpr] = {}
    upper: dict[Var, PrimExpr] = {}  # exclusive

    def visit(cond: PrimExpr) -> None:
        """Record the bounds a comparison gives its variable sides."""
        if isinstance(cond, And):
            visit(cond.a)
            visit(cond.b)
            return
        if not isinstance(cond, (LT, LE, GT, GE)) or cond.a.dtype.lanes != 1 or not cond.a.dtype.is_integer:
            return
        a, b = (cond.b, cond.a) if isinstance(cond, (GT, GE)) else (cond.a, cond.b)  # a < b or a <= b
        strict = isinstance(cond, (LT, GT))
        if isinstance(b, Var):
            lower.setdefault(b, a + 1 if strict else a)
        if isinstance(a, Var):
            upper.setdefault(a, b if strict else b + 1)

    for assumption in assumptions:
        visit(assumption)
    return {var: Range(lower[var], upper[var] - lower[var]) for var in lower
            if var in upper and lower[var].dtype == var.dtype and upper[var].dtype == var.dtype}


def _solve(condition: PrimExpr, assumptions: Sequence[PrimExpr], timeout_ms: int | None,
           overflow: str) -> ProofResult:
    import z3

    from .z3_bridge import Encoder

    encoder = Encoder(overflow)
    try:
        claim = encoder.encode(condition)
        facts = [encoder.encode(a) for a in assumptions]
    except z3.Z3Exception as exc:
        return ProofResult("unknown", reason=f"cannot encode the claim for Z3: {exc}", via="z3")
    # every free variable gets a Z3 constant, even one that only appears in an opaque part
    for var in free_vars((condition,) + tuple(assumptions)):
        if var.dtype.lanes == 1 and (var.dtype.is_integer or var.dtype.is_bool):
            encoder.var(var)
    solver = make_solver()
    limit = timeout_ms if timeout_ms is not None else int(os.environ.get("REFCOMP_SMT_TIMEOUT_MS", DEFAULT_TIMEOUT_MS))
    solver.set("timeout", int(limit))
    solver.add(*encoder.side)
    solver.add(*facts)
    solver.add(z3.Not(claim))
    _dump(solver, condition, assumptions)
    answer = solver.check()
    if answer == z3.unsat:
        return ProofResult("proved", via="z3")
    if answer == z3.unknown:
        return ProofResult("unknown", reason=f"Z3 gave up ({solver.reason_unknown()})", via="z3")
    model = _shrink(solver, encoder, solver.model())
    result = _counterexample(model, encoder, condition, assumptions, overflow)
    if result.unknown and encoder.divisors:
        # Z3's x div 0 is arbitrary, so its model may rest on a division by zero that has no value
        # in refcomp; look again for a violation where every divisor is nonzero
        solver.add(*[d != 0 for d in encoder.divisors])
        again = solver.check()
        if again == z3.sat:
            result = _counterexample(solver.model(), encoder, condition, assumptions, overflow)
        elif again == z3.unsat:
            result = ProofResult("unknown", reason="the claim fails only where a divisor is 0", via="z3")
    return result


# Extra solver calls spent making a counterexample small, and the time limit of each.
_SHRINK_STEPS = 8
_SHRINK_TIMEOUT_MS = 200


def _shrink(solver: Any, encoder: Encoder, model: Any) -> Any:
    """A model with smaller magnitudes where Z3 finds one quickly (`n = 1` reads better than 7341).

    Sizes first (the variables a user sets), then the rest; each step asks for |v| below its
    current value and keeps the new model only if one exists.  Never needed for correctness.
    """
    import z3

    variables = sorted((v for v in encoder.vars if v.dtype.is_integer),
                       key=lambda v: (not isinstance(v, SizeVar), v.name))
    solver.set("timeout", _SHRINK_TIMEOUT_MS)
    steps = 0
    for var in variables:
        term = encoder.vars[var]
        while steps < _SHRINK_STEPS:
            value = model.eval(term, model_completion=True).as_long()
            if value == 0:
                break
            steps += 1
            solver.push()
            solver.add(z3.If(term >= 0, term, -term) < abs(value))
            if solver.check() == z3.sat:
                model = solver.model()
                solver.pop()
                continue
            solver.pop()
            break
    return model


def make_solver() -> Any:
    """A Z3 solver for refcomp's claims.

    Preprocessing first (simplify, propagate values, solve equations) turns the typical flattened
    index claim `i*m + j < n*m` from seconds of nonlinear search in the default solver into
    milliseconds; the rest goes to Z3's SMT core, which answers sat/unsat/unknown as usual.
    """
    import z3

    return z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()


def _counterexample(model: Any, encoder: Encoder, condition: PrimExpr, assumptions: Sequence[PrimExpr],
                    overflow: str) -> ProofResult:
    import z3

    values: dict[Var, Any] = {}
    for var, term in encoder.vars.items():
        value = model.eval(term, model_completion=True)
        values[var] = z3.is_true(value) if var.dtype.is_bool else value.as_long()
    opaque_values = {}
    for key, (node, term) in encoder.opaque.items():
        value = model.eval(term, model_completion=True)
        opaque_values[key] = z3.is_true(value) if z3.is_bool(value) else (
            value.as_long() if z3.is_int_value(value) else None)

    def opaque(node: PrimExpr) -> Any:
        """The model's value for an opaque part of the claim."""
        value = opaque_values.get(expr_key(node))
        if value is None:
            raise EvaluationError(f"no value for {type(node).__name__}")
        return value

    wrap = overflow == "wrap"
    try:
        holds = all(evaluate(a, values, wrap=wrap, opaque=opaque) for a in assumptions)
        violated = not evaluate(condition, values, wrap=wrap, opaque=opaque)
    except EvaluationError as exc:
        return ProofResult("unknown", reason=f"Z3's counterexample could not be checked ({exc})", via="z3")
    if not (holds and violated):
        return ProofResult("unknown", reason="Z3's counterexample does not violate the claim when evaluated",
                           via="z3")
    named = _named(values)
    for key, (node, _) in encoder.opaque.items():  # e.g. the value an index buffer would hold
        value = opaque_values.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and node.dtype.is_integer:
            named.setdefault(render(node), value)
    # results are cached and shared: hand out read-only views
    return ProofResult("disproved", counterexample=MappingProxyType(named), via="z3", model=MappingProxyType(values))


def _named(values: dict[Var, Any]) -> dict[str, Any]:
    """Values by the users' names; a name shared by two variables gets a suffix (i, i_1)."""
    out: dict[str, Any] = {}
    for var, value in values.items():
        name, k = var.name, 1
        while name in out:
            name = f"{var.name}_{k}"
            k += 1
        out[name] = int(value) if not isinstance(value, bool) else value
    return out


_dump_count = 0


def _dump(solver: Any, condition: PrimExpr, assumptions: Sequence[PrimExpr]) -> None:
    directory = os.environ.get("REFCOMP_SMT_DUMP")
    if not directory:
        return
    global _dump_count
    _dump_count += 1
    os.makedirs(directory, exist_ok=True)
    text = solver.to_smt2()
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    header = [f"; refcomp query: prove {render(condition)}"]
    header += [f";   assuming {render(a)}" for a in assumptions]
    header.append("; sat means the claim is false (the model is a counterexample)")
    path = os.path.join(directory, f"query_{os.getpid()}_{_dump_count:05d}_{digest}.smt2")
    with open(path, "w") as handle:
        handle.write("\n".join(header) + "\n" + text)
