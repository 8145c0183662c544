"""The test tree itself: module names must be unique (the folders are not packages)."""
from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique():
    root = Path(__file__).parent
    names = Counter(p.name for p in root.rglob("*.py") if p.name not in ("conftest.py", "__init__.py"))
    clashes = sorted(name for name, count in names.items() if count > 1)
    assert not clashes, f"test modules with the same file name break collection: {clashes}"
