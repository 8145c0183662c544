"""Targets: what a build compiles for, parsed and validated in one place (spec/targets.md).

    target  := kind option*          words separated by blanks
    option  := -flag | -name=value

`parse_target("c -std=c99")` gives a `Target`, an immutable, hashable value (it keys build
caches) whose `str()` is its canonical text: `parse_target(str(t)) == t`.  Each kind declares the
options it accepts in `KINDS`; everything else -- an unknown kind, an unknown or repeated option,
two options of one exclusive group, a value of the wrong form -- is a BuildError that lists the
valid targets.  What an option *does* is the business of the backend that reads it (emit_c's
toolchain for "c", emit_cuda's for "cuda"); this module only knows the vocabulary.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from .errors import BuildError


@dataclass(frozen=True)
class TargetKind:
    """The vocabulary of one target kind: its flags, its -name=value options, exclusive groups."""

    name: str
    summary: str
    flags: tuple[str, ...] = ()
    values: tuple[tuple[str, str, str], ...] = ()  # (name, regex the value must match, example)
    exclusive: tuple[tuple[str, ...], ...] = ()  # at most one option of each group
    examples: tuple[str, ...] = ()

    def describe(self) -> str:
        options = list(self.flags) + [f"{name}={example}" for name, _, example in self.values]
        return f"{self.name!r} ({self.summary}; options: {', '.join(options) or 'none'})"

    def option_names(self) -> list[str]:
        return list(self.flags) + [name + "=" for name, _, _ in self.values]


_C_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")

KINDS: dict[str, TargetKind] = {
    "c": TargetKind(
        "c", "C99 + OpenMP built with gcc for this machine",
        flags=("-std=c99", "-sanitize", *_C_OPT_LEVELS, "-g", "-Werror", "-no-openmp"),
        exclusive=(_C_OPT_LEVELS,),
        examples=("c", "c -std=c99", "c -sanitize -O0 -g")),
    "cuda": TargetKind(
        "cuda", "CUDA C++ built with nvcc",
        flags=("-O0", "-g", "-G", "-lineinfo"),
        values=(("-arch", r"sm_[0-9]+[a-z]?", "sm_80"),),
        examples=("cuda", "cuda -arch=sm_80")),
    "interpret": TargetKind(
        "interpret", "the reference interpreter, no compiler: slow, for testing",
        examples=("interpret",)),
}


@dataclass(frozen=True)
class Target:
    """A validated target: a kind and its options, in the order written."""

    kind: str
    options: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not isinstance(self.options, tuple):
            raise BuildError(f"Target(kind, options): expected a str and a tuple of str, "
                             f"got {self.kind!r}, {self.options!r}")
        _validate(self.kind, self.options, " ".join((str(self.kind),) + tuple(map(str, self.options))))

    def __str__(self) -> str:
        return " ".join((self.kind,) + self.options)

    @property
    def text(self) -> str:
        """The canonical target string (the same as str(self))."""
        return str(self)

    def has(self, flag: str) -> bool:
        """Whether the flag (an option without a value, e.g. "-std=c99" or "-g") is set."""
        return flag in self.options

    def value(self, name: str, default: str | None = None) -> str | None:
        """The value of a -name=value option (e.g. value("-arch") -> "sm_80"), or default."""
        prefix = name + "="
        for option in self.options:
            if option.startswith(prefix):
                return option[len(prefix):]
        return default

    def kind_spec(self) -> TargetKind:
        return KINDS[self.kind]


def valid_targets(kinds: tuple[str, ...] | None = None) -> str:
    """One line per target kind (restricted to kinds, when given) for error messages."""
    names = kinds if kinds is not None else tuple(KINDS)
    return "valid targets: " + "; ".join(KINDS[name].describe() for name in names)


def parse_target(spec: str | Target | None, kinds: tuple[str, ...] | None = None,
                 what: str = "build") -> Target:
    """spec as a Target; kinds, when given, are the kinds this caller supports.

    `what` names the caller in error messages ("build", "graph.build").
    """
    if isinstance(spec, Target):
        target = spec
    elif isinstance(spec, str):
        words = spec.split()
        if not words:
            raise BuildError(f"{what}: the target is empty; {valid_targets(kinds)}")
        _validate(words[0], tuple(words[1:]), spec, kinds, what)
        target = Target(words[0], tuple(words[1:]))
    else:
        raise BuildError(f"{what}: target must be a target string such as 'c' or 'c -std=c99', "
                         f"got {spec!r}; {valid_targets(kinds)}")
    if kinds is not None and target.kind not in kinds:
        raise BuildError(f"{what}: target {str(target)!r} is not supported here; {valid_targets(kinds)}")
    return target


def _validate(kind: str, options: tuple, text: str, kinds: tuple[str, ...] | None = None,
              what: str = "build") -> None:
    spec = KINDS.get(kind)
    if spec is None:
        raise BuildError(f"{what}: target {text!r}: unknown kind {kind!r}{_suggest(kind, list(KINDS))}; "
                         f"{valid_targets(kinds)}")
    seen: set[str] = set()
    for option in options:
        if not isinstance(option, str) or not option:
            raise BuildError(f"{what}: target {text!r}: options must be non-empty strings, got {option!r}")
        name = option.split("=", 1)[0] if "=" in option and option not in spec.flags else option
        if name in seen:
            raise BuildError(f"{what}: target {text!r}: option {name!r} is given twice")
        seen.add(name)
        if option in spec.flags:
            continue
        valued = next((v for v in spec.values if v[0] == name), None)
        if valued is None or "=" not in option:
            raise BuildError(f"{what}: target {text!r}: unknown option {option!r} for kind {kind!r}"
                             f"{_suggest(option, spec.option_names())}; {valid_targets(kinds)}")
        value = option.split("=", 1)[1]
        if not re.fullmatch(valued[1], value):
            raise BuildError(f"{what}: target {text!r}: {name} must look like {valued[2]}, got {value!r}")
    for group in spec.exclusive:
        chosen = [option for option in options if option in group]
        if len(chosen) > 1:
            raise BuildError(f"{what}: target {text!r}: options {' and '.join(chosen)} conflict "
                             f"(choose one of {', '.join(group)})")


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


__all__ = ["KINDS", "Target", "TargetKind", "parse_target", "valid_targets"]
