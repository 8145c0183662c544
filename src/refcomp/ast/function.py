"""Functions and modules: PrimFunc (loop level) and IRModule (holds both levels)."""
from __future__ import annotations

from typing import Any, Mapping

from .buffer import Buffer
from .expr import Var
from .node import Node, freeze_mapping, node, set_field
from .stmt import Stmt


@node
class PrimFunc(Node):
    """A loop-level function: buffer and scalar parameters, a body, attributes.

    Buffers passed as parameters are read and written in place (destination passing).  Size
    variables in buffer shapes are bound from the arrays at call time.
    """

    params: tuple[Buffer | Var, ...]
    body: Stmt
    name: str = "main"
    attrs: Mapping[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        set_field(self, "params", tuple(self.params))
        set_field(self, "attrs", freeze_mapping(self.attrs))
        for p in self.params:
            if not isinstance(p, (Buffer, Var)):
                raise TypeError(f"PrimFunc {self.name}: parameter must be a Buffer or Var, got {p!r}")
        if not isinstance(self.body, Stmt):
            raise TypeError(f"PrimFunc {self.name}: body must be a Stmt, got {self.body!r}")

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    @property
    def scalar_params(self) -> tuple[Var, ...]:
        return tuple(p for p in self.params if isinstance(p, Var))

    def with_attr(self, key: str, value: Any) -> "PrimFunc":
        attrs = dict(self.attrs)
        attrs[key] = value
        return self.with_(attrs=freeze_mapping(attrs))


@node
class IRModule(Node):
    """A set of named functions, graph-level and loop-level side by side."""

    functions: Mapping[str, Node]
    attrs: Mapping[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        set_field(self, "functions", freeze_mapping(self.functions))
        set_field(self, "attrs", freeze_mapping(self.attrs))

    def __getitem__(self, name: str) -> Node:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"module has no function {name!r}; it has {sorted(self.functions)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self):
        return iter(self.functions.items())

    def with_function(self, name: str, func: Node) -> "IRModule":
        functions = dict(self.functions)
        functions[name] = func
        return self.with_(functions=freeze_mapping(functions))

    def without_function(self, name: str) -> "IRModule":
        functions = dict(self.functions)
        del functions[name]
        return self.with_(functions=freeze_mapping(functions))
