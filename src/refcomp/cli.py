"""The `refcomp` command: `refcomp demo`, `refcomp check FILE`, `refcomp tune WHAT`, `refcomp profile
MODEL`, `refcomp generate`, `refcomp export-c MODEL --out DIR`, `refcomp version`."""
from __future__ import annotations

import argparse
import os
import sys


def _demo(argv: list[str]) -> int:
    from . import demo

    parser = argparse.ArgumentParser(
        prog="refcomp demo", description="Build a small model and a few kernels with refcomp's default schedules, "
        "check each against numpy, and time them beside numpy and, where installed, onnxruntime. Takes no "
        "arguments; well under a minute on a laptop.")
    parser.parse_args(argv)  # -h / --help prints the above; anything else is a usage error (exit 2)
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

    argparse.ArgumentParser(prog="refcomp version", description="print the version").parse_args(argv)

    print(f"refcomp {__version__}")
    return 0


def _export_c(argv: list[str]) -> int:
    from .errors import RefcompError
    from .export import export_c

    parser = argparse.ArgumentParser(
        prog="refcomp export-c",
        description="write a whole model as standalone C99 (model.h, model.c, weights, Makefile, test "
                    "harness, memory report); then `make -C DIR test [TARGET=arm-none-eabi|aarch64-linux-gnu]`")
    parser.add_argument("model", help="an .onnx file or a script file with a graph function main")
    parser.add_argument("--out", required=True, help="the directory to write (created if needed)")
    parser.add_argument("--bound", action="append", default=[], metavar="NAME=N",
                        help="upper bound of a symbolic dim (repeatable); every symbolic dim needs one")
    parser.add_argument("--weights", choices=("const", "blob"), default="const",
                        help="const arrays in C (default) or a blob file the caller loads")
    parser.add_argument("--openmp", action="store_true", help="keep the kernels' parallel loops (OpenMP)")
    parser.add_argument("--name", default="model", help="prefix of the API and the file names (default: model)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the recorded random inputs")
    parser.add_argument("--no-schedule", action="store_true",
                        help="plain loop nests: the least working memory and code, slower than the default schedules")
    args = parser.parse_args(argv)
    bounds = {}
    for item in args.bound:
        name, _, value = item.partition("=")
        try:
            bounds[name.strip()] = int(value)
        except ValueError:
            print(f"refcomp export-c: --bound expects NAME=N with an integer N, got {item!r}", file=sys.stderr)
            return 2
    try:
        export_c(args.model, args.out, bounds, weights=args.weights, openmp=args.openmp, name=args.name,
                 seed=args.seed, schedule=not args.no_schedule, quiet=False)
    except RefcompError as exc:
        print(f"refcomp export-c: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}; run: make -C {args.out} test")
    return 0


def _tune(argv: list[str]) -> int:
    from .tune_command import main

    return main(argv)


def _profile(argv: list[str]) -> int:
    from .profile_command import main

    return main(argv)


COMMANDS = {
    "demo": (_demo, "build and run a few kernels, compare with numpy"),
    "check": (_check, "prove every function in a file shape-correct (exit 0 only when all are proved)"),
    "tune": (_tune, "tune a workload, a script file or an ONNX model: progress bar, database, curve plot"),
    "profile": (_profile, "build an ONNX model and print where a call spends its time, kernel by kernel"),
    "export-c": (_export_c, "write a model as standalone C99 with a static arena, a Makefile and a test harness"),
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
    from .errors import InternalError, RefcompError

    try:
        return int(function(argv[1:]) or 0)
    except RefcompError as error:
        if isinstance(error, InternalError):
            raise  # a refcomp bug: the traceback belongs in the report
        # what the user can fix (a missing compiler, a bad file) in one message, without a traceback
        print(f"refcomp {argv[0]}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"refcomp {argv[0]}: interrupted", file=sys.stderr)
        return 128 + 2
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
