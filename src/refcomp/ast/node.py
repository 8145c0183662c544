"""The base of every IR node: frozen, slotted, compared by identity, rebuilt with `with_`."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

# Every node class is declared with this decorator.  eq=False keeps identity comparison and
# hashing: two loops both named `i` are different loops.  Structural equality is a function
# (`refcomp.ast.structural_equal`), never `==`.
node = dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False)


class Node:
    """Base class of all IR nodes."""

    __slots__ = ()

    def with_(self, **changes: Any):
        """Return a copy with `changes` applied, or `self` when every change is the current value."""
        if all(getattr(self, key) is value for key, value in changes.items()):
            return self
        return dataclasses.replace(self, **changes)

    def fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))

    def script(self) -> str:
        """The IR printed in refcomp's script format."""
        from .printer import script

        return script(self)

    def __repr__(self) -> str:
        try:
            from .printer import script

            text = script(self)
        except Exception:  # the printer may not know a half-built node; fall back
            text = object.__repr__(self)
        return text if "\n" not in text else f"<{type(self).__name__}>\n{text}"


def freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """An immutable copy of a str-keyed mapping (annotations, attributes)."""
    if value is None:
        return MappingProxyType({})
    if isinstance(value, MappingProxyType):
        return value
    return MappingProxyType(dict(value))


def set_field(obj: Node, name: str, value: Any) -> None:
    """Assign a field during __post_init__ of a frozen node (normalisation only)."""
    object.__setattr__(obj, name, value)
