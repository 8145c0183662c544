"""Names a package exports but imports on first use (PEP 562), so importing the package stays cheap."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, tuple[str, str | None]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for package: names maps each public name to (module, attribute),
    attribute None for the module itself.  A loaded name is stored in the package, so the
    lookup runs once per name."""

    def __getattr__(name: str) -> Any:
        try:
            module_name, attribute = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
