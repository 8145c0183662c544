"""The `refcomp` command: `refcomp demo`, `refcomp check FILE`, `refcomp generate`, `refcomp version`."""
from __future__ import annotations

import argparse
import os
import sys


def _demo(argv: list[str]) -> int:
    from . import demo

    if argv:
        print(f"refcomp demo takes no arguments, got {argv}", file=sys.stderr)
        return 2
    return demo.main() or 0


def _check(argv: list[str]) -> int:
    from . import _connect_graph_checker
    from .shape.check import main

    _connect_graph_checker()
    return main(argv)


def _generate(argv: list[str]) -> int:
    from .llm.command import main

    return main(argv)


def _version(argv: list[str]) -> int:
    from .version import __version__

    print(f"refcomp {__version__}")
    return 0


COMMANDS = {
    "demo": (_demo, "build and run a few kernels, compare with numpy"),
    "check": (_check, "prove every function in a file shape-correct (exit 0 only when all are proved)"),
    "generate": (_generate, "generate text with a Llama model (default: the shipped byte-level one), streaming"),
    "version": (_version, "print the version"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="refcomp", description="refcomp: a correctness-focused tensor compiler",
        epilog="\n".join(f"  {name:8} {text}" for name, (_, text) in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=sorted(COMMANDS), help="what to do")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        parser.print_usage(sys.stderr)
        print(f"refcomp: unknown command {argv[0]!r}; choose from {', '.join(sorted(COMMANDS))}", file=sys.stderr)
        return 2
    function, _ = COMMANDS[argv[0]]
    try:
        return int(function(argv[1:]) or 0)
    except BrokenPipeError:
        # The reader went away (`refcomp check f.py | head`): end quietly, with the shell's
        # SIGPIPE status, so a pipeline never mistakes a cut-off report for success.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 128 + 13


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
