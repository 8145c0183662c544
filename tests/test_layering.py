"""The floors of src/refcomp (spec/layering.md): every import runs downward, none upward or sideways.

The checker reads the source, not the running interpreter, so it sees every way one module can
reach another: `import x`, `from x import y`, relative imports, imports inside functions and under
`if TYPE_CHECKING:`, `importlib.import_module("...")` / `__import__("...")` with a literal name, and
any string constant that names a refcomp module (a name handed to a helper that imports it later).
"""
from __future__ import annotations

import ast
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first.  A module may import modules of its own top-level package and of any lower floor.
# Packages on one floor are siblings and may not import each other.  "" is the face,
# refcomp/__init__.py, which reaches everything below it through lazy names.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "version", "lazy"),  # the ground: they import nothing of refcomp
    ("target",),        # the Target type every build parses its target string into
    ("ast",),           # the IR of both levels, printer, parser, structural equality
    ("shape",),         # the expression toolkit and the prover
    ("te",),            # tensor expressions -> PrimFunc
    ("loops",),         # schedules, lowering, the interpreter
    ("emit_c",),        # C99/OpenMP source from lowered loops, gcc, the build cache
    ("emit_cuda",),     # CUDA source on emit_c's public base, nvcc
    ("runtime",),       # loads what the emitters built; the VM
    ("driver",),        # refcomp.build
    ("graph",),         # operators, passes, graph lowering
    ("tune",),          # design spaces, search, cost model, database, builder/runner
    ("sparse",),        # sparse formats, their invariants, sparse kernels
    ("llm",),           # Llama-architecture decoding: model, KV caches, sampling, speculative decoding
    ("frontend",),      # ONNX and other importers
    ("export",),        # standalone C99 export of whole models (export-c)
    ("",),              # the face: refcomp/__init__.py
    ("testing", "workloads"),  # helpers for tests, benchmarks and the demo, built on the face
    ("demo", "tune_command", "profile_command"),  # the demo; `refcomp tune`'s loading; `refcomp profile`
    ("cli",),
    ("__main__",),      # `python -m refcomp`: the cli's main
)
FLOOR_OF = {name: level for level, names in enumerate(FLOORS) for name in names}

_MODULE_NAME = re.compile(r"refcomp(\.[A-Za-z_][A-Za-z0-9_]*)+")
_IMPORT_FUNCTIONS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Import:
    """One reference from module `source` to module `target`, at `line` of the source file."""

    source: str
    target: str
    line: int
    how: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.how})"


def module_names(src: Path) -> dict[str, Path]:
    """Every module under src/refcomp: dotted name -> file."""
    found = {}
    for path in sorted((src / "refcomp").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve_relative(package: str, level: int, name: str | None) -> str:
    base = package.split(".")
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known_prefix(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of name that is a refcomp module (None for the bare face or no module)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every reference from module to another refcomp module, wherever it stands in the file."""
    package = _package_of(module, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def add(target: str, line: int, how: str) -> None:
        """Record target if it names a module of the tree (the face counts only when named exactly)."""
        known = "refcomp" if target == "refcomp" else _known_prefix(target, modules)
        if known is None or (known == "refcomp" and target != "refcomp"):
            return
        item = Import(module, known, line, how)
        if item not in found:
            found.append(item)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "refcomp":
                    add(alias.name, node.lineno, "import")
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(package, node.level, node.module) if node.level else (node.module or "")
            if base.split(".")[0] != "refcomp":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in modules else base, node.lineno, "from-import")
        elif isinstance(node, ast.Call):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if called in _IMPORT_FUNCTIONS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                name = node.args[0].value
                if name.startswith("."):
                    level = len(name) - len(name.lstrip("."))
                    add(_resolve_relative(package, level, name.lstrip(".") or None), node.lineno, called)
                elif name == "refcomp":
                    add(name, node.lineno, called)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_NAME.fullmatch(node.value):
                add(node.value, node.lineno, "module name in a string")
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and len(node.values) > 1:
                prefix = head.value.rpartition(".")[0]
                if _MODULE_NAME.fullmatch(prefix) and head.value.endswith("."):
                    add(prefix, node.lineno, "module name in an f-string")
    return found


def floor_of(module: str) -> int | None:
    """The floor of a refcomp module: that of its top-level package (the face for `refcomp`)."""
    parts = module.split(".")
    return FLOOR_OF.get(parts[1] if len(parts) > 1 else "")


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(imports: list[Import]) -> list[str]:
    """Each upward or sideways import, and each module that has no floor."""
    problems = []
    for item in imports:
        source_top, target_top = _top(item.source), _top(item.target)
        if source_top == target_top:
            continue
        source_floor, target_floor = floor_of(item.source), floor_of(item.target)
        if source_floor is None or target_floor is None:
            missing = item.source if source_floor is None else item.target
            problems.append(f"{item}: {missing} has no floor (add it to FLOORS and spec/layering.md)")
        elif target_floor > source_floor:
            problems.append(f"{item}: upward, {target_top or 'the face'} sits above {source_top or 'the face'}")
        elif target_floor == source_floor:
            problems.append(f"{item}: sideways, {source_top} and {target_top} are siblings")
    return problems


def all_imports(src: Path) -> list[Import]:
    modules = module_names(src)
    return [item for module, path in modules.items() for item in imports_of(module, path, modules)]


def _directory(module: str, modules: dict[str, Path] | None = None) -> str:
    """The package (directory) a module belongs to: itself for a package's __init__."""
    if modules is not None and modules.get(module, Path()).name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def import_cycles(imports: list[Import], modules: dict[str, Path] | None = None) -> list[list[str]]:
    """Groups of packages (directories) that import each other, directly or through others.

    Modules of one directory may refer to one another both ways (the IR's nodes print themselves
    with the printer, which walks the nodes); between directories, imports run one way.
    """
    graph: dict[str, set[str]] = {}
    for item in imports:
        source, target = _directory(item.source, modules), _directory(item.target, modules)
        if source == target or source.startswith(target + "."):
            continue  # inside one directory, or a subpackage using its parent's names
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(start: str) -> None:
        """Tarjan's strongly connected components, iteratively (deep import chains)."""
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(groups)


# Pairs that import one way only although they sit in one directory: (lower, upper) means upper
# may import lower and lower never imports upper.
ONE_WAY = (
    ("refcomp.runtime.vm", "refcomp.runtime.blas"),   # blas registers its externs and session into the VM
    ("refcomp.shape.check", "refcomp.graph.check"),   # the face hands the graph checker to shape.check
)


# ----------------------------------------------------------------------------- the tree as it is

def test_every_top_level_module_has_a_floor():
    tops = {_top(name) for name in module_names(SRC)}
    assert tops - set(FLOOR_OF) == set(), "give each new package or module a floor in FLOORS and spec/layering.md"


def test_no_import_runs_upward_or_sideways():
    problems = violations(all_imports(SRC))
    assert not problems, "imports against the floors of spec/layering.md:\n" + "\n".join(problems)


def test_errors_imports_nothing_of_refcomp():
    modules = module_names(SRC)
    found = imports_of("refcomp.errors", modules["refcomp.errors"], modules)
    assert not found, "errors is the ground floor:\n" + "\n".join(map(str, found))


def test_no_import_cycles_between_packages():
    cycles = import_cycles(all_imports(SRC), module_names(SRC))
    assert not cycles, "packages that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("lower, upper", ONE_WAY)
def test_one_way_pairs(lower, upper):
    modules = module_names(SRC)
    back = [str(item) for item in imports_of(lower, modules[lower], modules) if item.target == upper]
    assert not back, f"{lower} must not import {upper}: " + ", ".join(back)


# ----------------------------------------------------------------------------- the checker can fail

def _planted(tmp_path: Path, where: str, text: str) -> list[str]:
    """The violations of one module added to (or replacing one of) the tree at src/refcomp/<where>."""
    modules = module_names(SRC)
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    name = "refcomp." + where.removesuffix(".py").replace("/", ".")
    modules[name] = path
    return violations(imports_of(name, path, modules))


@pytest.mark.parametrize("planted, expected", [
    ("from ..graph.op import registry\n", "upward"),
    ("def f():\n    from refcomp.frontend import onnx\n    return onnx\n", "upward"),
    ("import importlib\n\ndef f():\n    return importlib.import_module('refcomp.runtime.vm')\n", "upward"),
    ("import importlib\n\ndef f():\n    return importlib.import_module('..driver', __package__)\n", "upward"),
    ("def f():\n    return __import__('refcomp')\n", "upward"),
    ("LATER = ('refcomp.graph.check', 'check_module')\n", "upward"),
    ("def f(family):\n    return f'refcomp.graph.op.{family}'\n", "upward"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..loops.schedule import Schedule\n", "upward"),
    ("import refcomp\n", "upward"),
    ("from .. import te\n", "upward"),
    ("from refcomp import build\n", "upward"),
])
def test_a_planted_upward_import_is_found(tmp_path, planted, expected):
    (problem,) = _planted(tmp_path, "shape/planted.py", planted)
    assert problem.startswith("refcomp.shape.planted:") and expected in problem


def test_an_upward_import_planted_in_a_copy_of_the_tree_is_found(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(SRC / "refcomp", copy / "refcomp", ignore=shutil.ignore_patterns("__pycache__"))
    te_init = copy / "refcomp" / "te" / "__init__.py"
    te_init.write_text(te_init.read_text(encoding="utf-8") + "\n\ndef _later():\n    from ..graph import op\n",
                       encoding="utf-8")
    added = set(violations(all_imports(copy))) - set(violations(all_imports(SRC)))
    (problem,) = added
    assert problem.startswith("refcomp.te:") and "-> refcomp.graph.op (from-import): upward" in problem


def test_a_planted_sideways_import_is_found(tmp_path):
    (problem,) = _planted(tmp_path, "workloads.py", "from . import testing\n")
    assert problem.startswith("refcomp.workloads:1 -> refcomp.testing") and "sideways" in problem


def test_a_planted_import_from_a_module_without_a_floor_is_found(tmp_path):
    (problem,) = _planted(tmp_path, "unplaced/planted.py", "from ..graph import op\n")
    assert "refcomp.unplaced.planted has no floor" in problem


def test_the_same_imports_downward_pass(tmp_path):
    assert _planted(tmp_path, "frontend/planted.py", """
        import importlib
        from typing import TYPE_CHECKING
        from ..graph.op import registry
        from refcomp.loops import schedule
        if TYPE_CHECKING:
            from ..driver import build

        def f(family):
            from refcomp.frontend import onnx
            return importlib.import_module("refcomp.runtime.vm"), f"refcomp.graph.op.{family}", onnx
    """) == []


def test_a_planted_sideways_import_between_siblings_is_found():
    imports = [Import("refcomp.testing", "refcomp.workloads", 3, "import")]
    (problem,) = violations(imports)
    assert "sideways" in problem and "refcomp.testing:3" in problem


def test_a_downward_import_and_an_import_inside_a_package_pass():
    imports = [Import("refcomp.graph.passes.fuse_ops", "refcomp.loops.schedule", 1, "import"),
               Import("refcomp.loops.lower", "refcomp.loops.passes.fold", 2, "import"),
               Import("refcomp", "refcomp.frontend.onnx", 3, "module name in a string")]
    assert violations(imports) == []


def test_a_module_without_a_floor_is_reported():
    (problem,) = violations([Import("refcomp.unplaced.planted", "refcomp.graph", 1, "import")])
    assert "refcomp.unplaced.planted has no floor" in problem


def test_strings_that_are_not_module_names_are_ignored(tmp_path):
    assert _planted(tmp_path, "shape/planted.py", """
        import logging
        logger = logging.getLogger("refcomp.lower")
        SYMBOL = "refcomp.blas.sgemm_nn"
        TEXT = "see refcomp.graph.check for the graph layer"
        CACHE = ".cache/refcomp"
        NAME = "refcomp"
    """) == []


def test_a_planted_cycle_is_found():
    imports = [Import("refcomp.loops.passes.a", "refcomp.loops.primitives.b", 1, "import"),
               Import("refcomp.loops.primitives.b", "refcomp.loops.intrin.c", 1, "import"),
               Import("refcomp.loops.intrin.c", "refcomp.loops.passes.d", 9, "from-import"),
               Import("refcomp.loops.passes.d", "refcomp.loops.passes.a", 2, "from-import"),
               Import("refcomp.loops.intrin.c", "refcomp.loops.c", 2, "from-import"),
               Import("refcomp.loops.passes.e", "refcomp.loops.e", 1, "from-import")]
    assert import_cycles(imports) == [["refcomp.loops.intrin", "refcomp.loops.passes", "refcomp.loops.primitives"]]


def test_the_readme_layout_table_matches_the_tree():
    readme = (SRC.parent / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Layout", 1)[1].split("\n\n", 2)[1]
    named: set[str] = set()
    for row in table.splitlines()[2:]:
        cell = row.split("|")[1]
        paths = re.findall(r"`([^`]+)`", cell)
        base = ""
        for path in paths:
            full = path if "/" in path.rstrip("/") or not base else base + path
            base = full.rsplit("/", 2)[0] + "/" if full.endswith("/") else full.rsplit("/", 1)[0] + "/"
            assert (SRC.parent / full).exists(), f"README layout names {full}, which does not exist"
            named.add(full.rstrip("/"))
    entries = {f"src/refcomp/{p.name}" for p in (SRC / "refcomp").iterdir()
               if p.name not in ("__pycache__", "py.typed")}
    assert entries - named == set(), "README layout table lacks these entries of src/refcomp"


def test_the_readme_layering_line_lists_the_floors_in_order():
    readme = (SRC.parent / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("### Layering", 1)[1].split("\n\n", 2)[1]
    sentence = paragraph.split(":", 1)[1].split(".\n", 1)[0]  # "`errors`, ... < the face < ... < `__main__`"
    floors = [tuple(re.findall(r"`([^`]+)`", part)) or (("",) if "the face" in part else ())
              for part in sentence.split("<")]
    assert floors == list(FLOORS), "README's layering line and FLOORS (and spec/layering.md) disagree"
