"""The `--input NAME=D0,D1,...` arguments of the commands that import a model (`refcomp tune`,
`refcomp profile`): an input's concrete shape, for the importer's shape_dict."""
from __future__ import annotations

from ..errors import RefcompError


def positive_ints(text: str) -> list[int]:
    """The comma-separated positive integers of text (ValueError, with the reason, otherwise)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def input_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """{name: shape} of `NAME=D0,D1,...` items (RefcompError naming the item that is not one)."""
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name.strip()] = tuple(positive_ints(dims))
        except ValueError as error:
            raise RefcompError(f"--input expects NAME=D0,D1,... with positive integer dims, got {item!r}: "
                               f"{error}") from None
    return shapes
