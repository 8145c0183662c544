"""README.md's Python snippets run as written, in order, in one namespace (as a reader pastes them)."""
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_snippets_run_in_order(capsys):
    snippets = python_snippets()
    assert len(snippets) >= 2  # a first kernel, then its schedule
    namespace: dict = {"__name__": "readme"}
    for snippet in snippets:
        exec(compile(snippet, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "@T.prim_func" in out and "refcomp_main(" in out  # the script format and the C text
    assert "sch.split(" in out  # the trace, as Python


def test_the_dotted_names_the_readme_gives_resolve():
    import importlib

    import refcomp

    text = README.read_text(encoding="utf-8")
    names = sorted(set(re.findall(r"\b(refcomp(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text)))
    assert "refcomp.tune.tune_model" in names
    for name in names:
        parts = name.split(".")
        value = getattr(refcomp, parts[1])  # after a plain `import refcomp`, as the snippets use it
        for depth, part in enumerate(parts[2:], start=3):
            if not hasattr(value, part):  # a deeper module, which a reader imports by its full name
                importlib.import_module(".".join(parts[:depth]))
            value = getattr(value, part)
