"""`refcomp check`: prove every function of a module or file shape-correct, and report.

    report = refcomp.check(func_or_module)   # Report(ok, problems, proved)
    refcomp check kernels.py [--format text|json]

A Python file is run as a module; every PrimFunc and IRModule bound at module level is checked,
plus whatever a module-level `__refcomp__` list names (objects, names of globals, or functions
that take no arguments and return one).  Any other file is read as script text
(refcomp.from_source).  Exit status: 0 when everything is proved, 1 when a problem is found,
2 for usage or load errors.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..ast.function import IRModule, PrimFunc
from ..ast.node import Node
from ..errors import RefcompError
from .facts import function_assumptions
from .in_bounds import Obligation, check_accesses
from .render import render


@dataclass
class Problem:
    """One thing not proved: what, where (function, block, the access), and a counterexample."""

    message: str
    function: str
    block: str | None = None
    spot: str = ""
    counterexample: dict[str, int] | None = None
    kind: str = "out_of_bounds"  # out_of_bounds | binding | unknown | error | shape | runtime_check | unchecked
    rendered: str = ""  # the IR lines around the spot, marked

    def as_dict(self) -> dict[str, Any]:
        """The problem as JSON-ready data."""
        return {"message": self.message, "function": self.function, "block": self.block, "spot": self.spot,
                "counterexample": self.counterexample, "kind": self.kind}


@dataclass
class Report:
    """The result of checking functions: ok only when every obligation of every function is proved."""

    problems: list[Problem] = field(default_factory=list)
    proved: list[str] = field(default_factory=list)
    functions: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> {"proved", "total"}
    assumed: dict[str, list[str]] = field(default_factory=dict)  # name -> stated assumptions it used

    @property
    def ok(self) -> bool:
        """True when nothing is left unproved."""
        return not self.problems

    def merge(self, other: "Report") -> "Report":
        """Add other's results to this report (in place); returns self."""
        self.problems += other.problems
        self.proved += other.proved
        self.functions.update(other.functions)
        self.assumed.update(other.assumed)
        return self

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, one entry per function."""
        return {"ok": self.ok, "functions": [
            {"name": name, "ok": not any(p.function == name for p in self.problems), **counts,
             "assumptions": self.assumed.get(name, []),
             "problems": [p.as_dict() for p in self.problems if p.function == name],
             "proved_accesses": [text for text in self.proved if text.startswith(name + ": ")]}
            for name, counts in self.functions.items()]}

    def text(self) -> str:
        """The report as readable lines."""
        lines = []
        for name, counts in self.functions.items():
            problems = [p for p in self.problems if p.function == name]
            assumed = self.assumed.get(name)
            given = f" (given {'; '.join(assumed)}, checked before each call)" if assumed else ""
            if not problems:
                lines.append(f"  ok    {name}: all {counts['total']} obligations proved{given}")
                continue
            lines.append(f"  FAIL  {name}: {counts['total'] - counts['proved']} of {counts['total']} not proved")
            for problem in problems:
                lines.append(f"        - {problem.message}")
                if problem.counterexample:
                    values = ", ".join(f"{k} = {v}" for k, v in problem.counterexample.items())
                    lines.append(f"          counterexample: {values}")
                for row in problem.rendered.splitlines():
                    lines.append(f"          {row}")
        failed = len({p.function for p in self.problems})
        lines.append(f"{len(self.functions) - failed} proved, {failed} with problems")
        return "\n".join(lines)


def check(target: "PrimFunc | IRModule | Iterable", *, name: str | None = None,
          timeout_ms: int | None = None, overflow: str = "assume_none") -> Report:
    """Prove every access of every PrimFunc in target in bounds; a Report of what was and was not.

    overflow="wrap" proves the accesses for two's-complement index arithmetic, with no
    assumption that index computations stay inside their dtype (spec/shapes.md).
    """
    report = Report()
    if isinstance(target, IRModule):
        graph_functions = []
        for fname, item in target:
            if isinstance(item, PrimFunc):
                report.merge(check(item, name=fname, timeout_ms=timeout_ms, overflow=overflow))
            else:
                graph_functions.append(fname)
        if graph_functions:
            report.merge(_check_graph(target, graph_functions))
        return report
    if isinstance(target, PrimFunc):
        return _check_func(target, name or target.name, timeout_ms, overflow)
    if isinstance(target, Node):  # a graph-level function: its shapes are checked by the graph layer
        label = name or getattr(target, "name", type(target).__name__)
        report.functions[label] = {"proved": 0, "total": 0}
        report.problems.append(Problem(f"{label}: a {type(target).__name__} is not a loop-level function; "
                                       "refcomp check proves PrimFuncs only", label, kind="unchecked"))
        return report
    for item in target:
        report.merge(check(item, timeout_ms=timeout_ms, overflow=overflow))
    return report


# Checkers for graph-level modules: fn(module) -> object with .proved, .undecided, .runtime_checks
# (lists of str), raising ShapeError for a refuted relation.  The graph layer sits above this
# package, so its checker is handed in by register_graph_checker (refcomp.check and the
# `refcomp check` command do so); without one, graph functions are reported unchecked.
GRAPH_CHECKERS: list[Any] = []


def register_graph_checker(checker: Any) -> None:
    """Use checker for the graph functions of modules given to check()."""
    if checker not in GRAPH_CHECKERS:
        GRAPH_CHECKERS.append(checker)


def _check_graph(module: IRModule, names: list[str]) -> Report:
    """The graph functions' call_tir relations, via the graph layer's checker."""
    report = Report()
    label = ", ".join(names)
    if not GRAPH_CHECKERS:
        report.functions[label] = {"proved": 0, "total": 0}
        report.problems.append(Problem(
            f"{label}: graph-level functions, and no graph checker is registered (use refcomp.check, "
            "or refcomp.shape.check.register_graph_checker(refcomp.graph.check.check_module))",
            label, kind="unchecked"))
        return report
    proved = total = 0
    for checker in GRAPH_CHECKERS:
        try:
            found = checker(module)
        except RefcompError as exc:
            report.problems.append(Problem(exc.message, label, counterexample=exc.counterexample,
                                           kind="shape", rendered=_marked(exc.ir, exc.spot)))
            total += 1
            continue
        proved += len(found.proved)
        total += len(found.proved) + len(found.undecided) + len(found.runtime_checks)
        report.proved += [f"{label}: {text}" for text in found.proved]
        report.problems += [Problem(f"not proved: {text}", label, kind="unknown") for text in found.undecided]
        report.problems += [Problem(f"left to a run-time check: {text}", label, kind="runtime_check")
                            for text in found.runtime_checks]
    report.functions[label] = {"proved": proved, "total": total}
    return report


def _check_func(func: PrimFunc, label: str, timeout_ms: int | None, overflow: str) -> Report:
    report = Report()
    try:
        _well_formed(func)
        obligations = check_accesses(func, timeout_ms=timeout_ms, overflow=overflow)
    except RefcompError as exc:
        report.functions[label] = {"proved": 0, "total": 1}
        report.problems.append(Problem(f"{label}: {exc.message}", label, counterexample=exc.counterexample,
                                       kind="error", rendered=_marked(exc.ir, exc.spot)))
        return report
    proved = [ob for ob in obligations if ob.proved]
    report.functions[label] = {"proved": len(proved), "total": len(obligations)}
    stated = function_assumptions(func)
    if stated:
        report.assumed[label] = [render(cond) for cond in stated]
    report.proved += [f"{label}: {_summary(ob)}" for ob in proved]
    seen = set()
    for ob in obligations:
        if ob.proved or ob.message in seen:
            continue
        seen.add(ob.message)
        kind = "unknown" if ob.result is not None and ob.result.unknown else (
            "binding" if ob.kind == "binding" else "out_of_bounds")
        report.problems.append(Problem(ob.message, label, ob.block, ob.access_text(), ob.counterexample(), kind,
                                       _marked(func, ob.node)))
    return report


def _well_formed(func: PrimFunc) -> None:
    from ..ast.wellformed import verify_well_formed

    verify_well_formed(func)


def _summary(ob: Obligation) -> str:
    if ob.kind == "binding":
        return ob.access_text()
    return f"{ob.kind} {ob.access_text()} dim {ob.dim}" + (f" (block {ob.block})" if ob.block else "")


def _marked(ir: Any, spot: Any) -> str:
    """The marked line of the printed IR and its caret line (empty without IR and a spot in it)."""
    if ir is None or spot is None:
        return ""
    from ..ast.printer import script

    rows = script(ir, mark=spot).splitlines()
    for k, row in enumerate(rows):
        if row.lstrip().startswith("-->"):
            return "\n".join(rows[k:k + 2]).rstrip()
    return ""


# ----------------------------------------------------------------------------- the command

class LoadError(Exception):
    """The file could not be read or run, or it defines nothing to check."""


def load_targets(path: str, purpose: str = "check") -> list[tuple[str, Any]]:
    """(label, function or module) for everything `refcomp check` (or `refcomp tune`: purpose "tune")
    should look at in path."""
    if os.path.isdir(path):
        raise LoadError(f"{path} is a directory; give a Python or script-format file")
    if not os.path.isfile(path):
        raise LoadError(f"no such file: {path}")
    if path.endswith(".py"):
        return _python_targets(path, purpose)
    from ..ast.parser import from_source

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        hint = " (an ONNX model? `refcomp tune` and `refcomp export-c` read those)" if path.endswith(".onnx") else ""
        raise LoadError(f"{path}: not a text file (byte {exc.start} is not UTF-8); give a Python or script-format "
                        f"file{hint}") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        parsed = from_source(text)
    except RefcompError as exc:
        raise LoadError(f"{path}: cannot parse: {exc}") from exc
    return [(getattr(parsed, "name", os.path.basename(path)), parsed)]


def _python_targets(path: str, purpose: str) -> list[tuple[str, Any]]:
    try:
        namespace = runpy.run_path(path, run_name="__refcomp_check__")
    except SystemExit as exc:
        raise LoadError(f"{path}: exited while loading (status {exc.code})") from exc
    except Exception as exc:  # a user's file may raise anything; report it, do not crash
        raise LoadError(f"{path}: raised {type(exc).__name__} while loading: {exc}") from exc
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def add(label: str, value: Any) -> None:
        """Record value under label once, if it is a function or module."""
        if isinstance(value, (PrimFunc, IRModule)) and id(value) not in seen:
            seen.add(id(value))
            found.append((label, value))

    for label, value in namespace.items():
        if not label.startswith("_"):
            add(label, value)
    for item in namespace.get("__refcomp__", ()) or ():
        if isinstance(item, str):
            if item not in namespace:
                raise LoadError(f"{path}: __refcomp__ names {item!r}, which the file does not define")
            value, label = namespace[item], item
        else:
            value, label = item, getattr(item, "name", getattr(item, "__name__", repr(item)))
        if callable(value) and not isinstance(value, (PrimFunc, IRModule)):
            try:
                value = value()
            except Exception as exc:
                raise LoadError(f"{path}: {label}() raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(value, (PrimFunc, IRModule)):
            raise LoadError(f"{path}: __refcomp__ entry {label} is a {type(value).__name__}, not a PrimFunc or IRModule")
        add(label, value)
    if not found:
        raise LoadError(f"{path}: defines no PrimFunc or IRModule to {purpose}")
    return found


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """`refcomp check FILE [--format text|json] [--timeout-ms N]`; returns the exit status."""
    parser = argparse.ArgumentParser(prog="refcomp check", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a Python file or a script-format file")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--timeout-ms", type=_positive_int, default=None, help="Z3 time limit per query")
    parser.add_argument("--overflow", choices=("assume_none", "wrap"), default="assume_none",
                        help="wrap: prove accesses even if index arithmetic wraps around")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        targets = load_targets(args.file)
    except LoadError as exc:
        print(f"refcomp check: {exc}", file=sys.stderr)
        return 2
    report = Report()
    for label, target in targets:
        report.merge(check(target, name=label, timeout_ms=args.timeout_ms, overflow=args.overflow))
    if args.format == "json":
        payload = report.as_dict()
        payload["file"] = args.file
        print(json.dumps(payload, indent=2))
    else:
        print(f"refcomp check {args.file}")
        print(report.text())
    return 0 if report.ok else 1


# `refcomp.shape.check` is both this module and (re-exported by the package) the check function;
# the CLI reaches `main` as `refcomp.shape.check.main` whichever of the two it gets.
check.main = main  # type: ignore[attr-defined]
