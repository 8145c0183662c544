"""The operator registry: for each op name, its shape rule, legalization, numpy reference and pattern.

An operator is registered once with `register(...)`.  The graph IR only names operators
(`Op("add")`); everything the compiler knows about them is looked up here.

- `infer(call, ctx) -> StructInfo`: the struct-info rule over symbolic shapes.  It asks `ctx` to
  decide every relation it needs (`ctx.require_equal`): a relation the prover refutes is a
  ShapeError with a counterexample, an undecided one becomes a runtime check.
- `legalize(*placeholders, **attrs)`: the op as a te computation, which `legalize_ops` turns into a
  PrimFunc and its call_tir.
- `legalize_call(bb, call) -> Call`: instead of `legalize`, for an op whose kernel is not a te
  computation (a hand-scheduled PrimFunc): adds its PrimFunc to `bb` and returns the call_tir.
- `reference(*arrays, **attrs)`: numpy semantics, used by tests, constant folding and the
  reference evaluator.
- `pattern`: how the op's loops look, for fusion ("elementwise" < "broadcast" < "injective" <
  "reduction" < "out_fusable" < "opaque").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

PATTERNS = ("elementwise", "broadcast", "injective", "reduction", "out_fusable", "opaque")


@dataclass(frozen=True)
class OpInfo:
    """Everything refcomp knows about one graph operator."""

    name: str
    infer: Callable[..., Any]
    reference: Callable[..., Any]
    legalize: Callable[..., Any] | None = None
    pattern: str = "opaque"
    pure: bool = True
    doc: str = ""
    host: bool = False  # run by the VM on the host through `reference` (no kernel; string ops)
    legalize_call: Callable[..., Any] | None = None  # (bb, call) -> call_tir, instead of a te legalize

    def evaluate(self, arrays, attrs):
        """The numpy reference on arrays with a call's attrs (constant dims become Python ints)."""
        return self.reference(*arrays, **{k: _plain(v) for k, v in dict(attrs).items()})


def _plain(value: Any) -> Any:
    from ...ast.expr import IntImm

    if isinstance(value, IntImm):
        return value.value
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


REGISTRY: dict[str, OpInfo] = {}


def register(name: str, *, infer: Callable, reference: Callable, legalize: Callable | None = None,
             pattern: str = "opaque", pure: bool = True, doc: str = "", host: bool = False,
             legalize_call: Callable | None = None) -> OpInfo:
    """Add an operator to the registry (a second registration of a name is a bug)."""
    if name in REGISTRY:
        raise ValueError(f"operator {name!r} is registered twice")
    if pattern not in PATTERNS:
        raise ValueError(f"operator {name!r}: pattern must be one of {PATTERNS}, got {pattern!r}")
    if legalize is not None and legalize_call is not None:
        raise ValueError(f"operator {name!r}: give legalize or legalize_call, not both")
    info = OpInfo(name, infer, reference, legalize, pattern, pure, doc, host, legalize_call)
    REGISTRY[name] = info
    return info


def get(name: str) -> OpInfo:
    """The registered operator `name`; an IRError naming close matches when unknown."""
    _load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        from difflib import get_close_matches

        from ...errors import IRError

        close = get_close_matches(name, list(REGISTRY), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else None
        raise IRError(f"unknown graph operator {name!r}", hint=hint) from None


def names() -> list[str]:
    """Every registered operator name, sorted."""
    _load_all()
    return sorted(REGISTRY)


_FAMILIES = ("base", "elementwise", "linear", "nn", "reduce", "manipulate", "index", "create", "image", "bitwise",
             "minifloat", "strings", "layout")
_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib

    for family in _FAMILIES:
        importlib.import_module(f"refcomp.graph.op.{family}")
